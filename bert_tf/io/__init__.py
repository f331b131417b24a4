"""What goes in and out of a process: files local and remote, worker processes, signals, progress on the terminal."""
