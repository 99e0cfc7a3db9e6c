"""The shared pieces every layer above may use: errors, atomic files and untrusted-file reads, the one output layer,
image references, the one Platform value, what the host has (hostfacts), the site settings. Nothing here imports
another folder."""
