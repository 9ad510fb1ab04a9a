from stead.cli import main

main()
