"""Sources: everything that talks to the outside world and yields raw lines."""
