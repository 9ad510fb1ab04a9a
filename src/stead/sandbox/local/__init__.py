"""The workspace itself: paths that stay inside it, file operations, glob and
grep, the persistent shell and its exec records.

The sandbox host runs this code for each isolated body; the ``unsafe_local``
provider runs it in the brain's own process (``sandbox.py``), with no
isolation at all.
"""
