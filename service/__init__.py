"""The work of serving a request, free of HTTP: typed errors the gateway maps once."""
