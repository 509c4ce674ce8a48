"""Rendering: rich objects for every screen (``screens``) and the pictures that explain a failed
check (``pictures``). Nothing here prints; the CLI hands these objects to a console."""
