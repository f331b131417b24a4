"""The command-line door: every flag defined once, typed options built from them, one-line errors."""
