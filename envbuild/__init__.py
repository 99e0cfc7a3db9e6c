"""envbuild: PyTorch + Transformers containers for every accelerator."""
