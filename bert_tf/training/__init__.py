"""The one train / evaluate / predict loop and what it runs on: options, runtime, precision, optimizer, run directory."""
