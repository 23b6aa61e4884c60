"""`import streaming` (MosaicML Streaming, for its MDSWriter and reader) in the
test environment. Streaming imports torchvision and transformers at import
time for its vision/text dataset classes and its DataLoader's isinstance
checks; neither is installed here (PyPI's torchvision is a CUDA build that does
not load beside the CPU torch, transformers is large and unused), so the few
names it imports are stubs that raise if called. MDSWriter, StreamingDataset
and the MDS encodings never call them. Real packages are used when present."""
import importlib.machinery
import importlib.util
import sys
import types


def _stub(name: str, **attrs) -> None:
    """Puts module `name` (and its parents) into sys.modules, with `attrs`."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub not in sys.modules:
            m = types.ModuleType(sub)
            m.__path__ = []
            m.__spec__ = importlib.machinery.ModuleSpec(sub, None, is_package=True)
            sys.modules[sub] = m
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], m)
    for k, v in attrs.items():
        setattr(sys.modules[name], k, v)


def _unavailable(*_a, **_k):
    raise RuntimeError("stub: not installed in the test environment")


def import_streaming():
    if "streaming" in sys.modules:
        return sys.modules["streaming"]
    import warnings
    warnings.filterwarnings("ignore", module="streaming")
    before = set(sys.modules)
    if importlib.util.find_spec("torchvision") is None:
        _stub("torchvision.datasets", VisionDataset=type("VisionDataset", (), {"__init__": _unavailable}))
        _stub("torchvision.transforms.functional", to_tensor=_unavailable)
    if importlib.util.find_spec("transformers") is None:
        _stub("transformers.feature_extraction_utils", BatchFeature=type("BatchFeature", (dict,), {}))
        _stub("transformers.tokenization_utils_base", BatchEncoding=type("BatchEncoding", (dict,), {}))
        _stub("transformers.models.auto.tokenization_auto",
              AutoTokenizer=type("AutoTokenizer", (), {"from_pretrained": staticmethod(_unavailable)}))
    import streaming
    # Streaming has bound the names it imported; the stubs leave sys.modules again, so
    # libraries that look for a loaded transformers or torchvision (datasets' pickling
    # does) do not find a fake one.
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("transformers", "torchvision") and \
                getattr(sys.modules[name], "__file__", None) is None:
            del sys.modules[name]
    return streaming
