"""Each failure signature's pattern is a message of the pinned vLLM, or says where else it comes from.

configs/signatures.yaml `origins` (pattern -> `vllm <version>` / torch / python / canary) is checked both
ways: an unannotated pattern must match a message in the sdist, a `vllm <version>` one must not (the
annotation would be stale), and a `canary` one must match the canary's own messages."""

from __future__ import annotations

import re

import pytest

from canary.paths import REPO_ROOT
from canary.targets.signatures import Signature, load_signatures
from canary.vllm_source.messages import literal_needle, matching, templates
from canary.vllm_source.tree import SourceTree

SIGNATURES = load_signatures()
PATTERNS = [(s.id, p) for s in SIGNATURES.signatures for p in s.patterns]


def _signature(sig_id: str) -> Signature:
    found = SIGNATURES.get(sig_id)
    assert found is not None
    return found


def _canary_tree() -> SourceTree:
    root = REPO_ROOT / "canary"
    files = {f"canary/{p.relative_to(root).as_posix()}": p.read_text() for p in root.rglob("*.py")}
    return SourceTree(label="the canary's own source", files=files)


def _hits(tree: SourceTree, pattern: str, prefix: str = "vllm/") -> list[str]:
    found = templates(tree, literal_needle(pattern), prefix)
    return [f"{h.template.where()}: {h.sample!r}" for h in matching(re.compile(pattern), found)]


@pytest.mark.parametrize(("sig_id", "pattern"), PATTERNS)
def test_pattern_is_a_pinned_vllm_message_or_declares_its_origin(sdist: SourceTree, sig_id: str, pattern: str) -> None:
    origin = _signature(sig_id).origins.get(pattern)
    if origin is None:
        assert _hits(sdist, pattern), (
            f"signature {sig_id}: /{pattern}/ matches no message in {sdist.label}; fix the pattern or declare "
            "its origin in configs/signatures.yaml `origins`"
        )
    elif origin.startswith("vllm "):
        hits = _hits(sdist, pattern)
        assert not hits, f"signature {sig_id}: /{pattern}/ is declared {origin!r} but is in {sdist.label}: {hits}"
    elif origin.startswith("canary"):
        assert _hits(_canary_tree(), pattern, "canary/"), f"signature {sig_id}: /{pattern}/ is no canary message"
    else:
        assert origin.split(":")[0] in ("torch", "python"), origin


# Messages the facts of this project rely on (the DeepSeek-V4/NIXL seeds and the block-size failures).
IN_PINNED = (
    "No common block size for",
    "cannot be split into",
    "KV cache view cannot be partitioned into NIXL regions",
    "KV cache tensor has too few blocks",
)
NOT_IN_PINNED = ("All kv cache tensors must have the same number of blocks",)


@pytest.mark.parametrize("message", IN_PINNED)
def test_message_is_in_the_pinned_vllm(sdist: SourceTree, message: str) -> None:
    found = templates(sdist, message)
    assert found, f"{message!r} is not in {sdist.label}"


@pytest.mark.parametrize("message", NOT_IN_PINNED)
def test_message_is_not_in_the_pinned_vllm(sdist: SourceTree, message: str) -> None:
    found = templates(sdist, message)
    assert not found, f"{message!r} is in {sdist.label}: {[t.where() for t in found]}"


def test_nixl_listener_thread_name_is_vllms(sdist: SourceTree) -> None:
    """'Exception in thread nixl_handshake_listener' is Python's line with vLLM's thread name."""
    path = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py"
    assert 'name="nixl_handshake_listener"' in sdist.read(path), f"{path}: the listener thread is renamed"


def test_a_pattern_with_a_typo_is_caught(sdist: SourceTree) -> None:
    assert _hits(sdist, r"No common block size for \d+")
    assert not _hits(sdist, r"No common kernel block size for \d+")


def test_literal_needle() -> None:
    assert literal_needle(r"No common block size for \d+") == "No common block size for"
    assert literal_needle(r"Model Runner V2 requires Triton\.") == "Model Runner V2 requires Triton."
    assert literal_needle(r"[Aa]ddress already in use") == "ddress already in use"
    assert literal_needle(r"Selected (?:MLA prefill )?backend .* is not valid") == "is not valid"


def test_origins_must_name_a_pattern_and_a_known_origin() -> None:
    base = {"id": "x", "title": "t", "priority": 1, "patterns": ["abc"]}
    assert Signature.model_validate({**base, "origins": {"abc": "vllm 0.21.0: gone"}}).origins
    with pytest.raises(ValueError, match="not one of the patterns"):
        Signature.model_validate({**base, "origins": {"abd": "torch"}})
    with pytest.raises(ValueError, match="must start with"):
        Signature.model_validate({**base, "origins": {"abc": "somewhere"}})
