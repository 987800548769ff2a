"""Small shared mechanisms: the one module that starts processes, atomic files, locks."""
