"""The torch.backends entry point (python/dist-info/entry_points.txt): `import torch` calls
load(), which imports the package and so registers the device. It is a module of its own so
that `import torch_mtia_emu` before torch works too: torch's import then loads this submodule
of the half-imported package, and the package finishes registering once torch is in."""


def load() -> None:
    import torch_mtia_emu  # noqa: F401
