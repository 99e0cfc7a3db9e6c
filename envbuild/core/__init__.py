"""The shared pieces every layer above may use: errors, atomic files, the one output layer, image references, the
one Platform value, what the host has (hostfacts), the registry HTTP client and its credentials, and the one door to
Docker (engine). Nothing here imports a stage."""
