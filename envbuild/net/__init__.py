"""The network: the one registry client, every answer read with a deadline, proxies/netrc/CA, credentials, and
the one reachability probe."""
