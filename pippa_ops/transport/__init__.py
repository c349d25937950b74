"""Running things on a host: the Transport interface (local or SSH), quoting, and the stdlib host agent."""
