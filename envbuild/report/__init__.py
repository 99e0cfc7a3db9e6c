"""What envbuild tells people at length: report (the text and JSON of doctor, detect and env) and site (the status
page built from published manifests)."""
