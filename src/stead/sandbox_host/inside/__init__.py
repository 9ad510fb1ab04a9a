"""Code that runs inside a sandbox, not in the host daemon.

Each module here is copied into the sandbox and run there as
``python3 -I -S <module>.py`` by the sandbox's system Python: no site-packages,
no stead, and no guarantee of the host's Python version beyond 3.11. Modules in
this package therefore use only the standard library, import nothing from stead
(nor from each other by package name) and must never crash the process they run in.
Keep this file free of code.
"""
