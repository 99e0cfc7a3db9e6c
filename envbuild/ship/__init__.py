"""The last stage: a smoked image to a registry and back. session (login, push, pull through the engine), publish
and index (one platform, then the multi-platform index), manifest (what landed), sbom, trust (keys, signatures,
attestations, verify) and pull."""
