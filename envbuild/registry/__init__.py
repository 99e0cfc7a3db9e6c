"""Stage 5: images <-> a registry. refs.py (names), credentials.py (one lookup for publish, pull and doctor),
session.py (login, push, pull through the engine), manifest.py (what landed), publish.py and pull.py."""
