"""HTTP requests of the parity check against an OpenAI-compatible vLLM server (loopback or cluster).

- `tokenize`: the server's /tokenize (special tokens included: BOS), so prompts are exact ids;
- `generate`: greedy completion (temperature 0, ignore_eos) with top-k logprobs per position;
- `rescore`: teacher-forced scoring of a continuation: the prompt + continuation as the prompt,
  `max_tokens: 1`, `prompt_logprobs: k` (a vLLM extra parameter); vLLM computes such requests
  without the prefix cache, so the scoring is a full prefill.

Every request has a timeout; every failure is a ParityError naming the URL.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from canary.checks.parity.fidelity import FidelityError, Series, series_from_completion, series_from_prompt_logprobs
from canary.errors import CanaryError


class ParityError(CanaryError):
    """Parity could not be measured (endpoint unreachable, unexpected response)."""


def root_url(base_url: str) -> str:
    """The server root of a base URL that may end in /v1."""
    return base_url.rstrip("/").removesuffix("/v1")


def post(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST JSON, return the JSON object answered."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:300]
        raise ParityError(f"POST {url}: HTTP {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise ParityError(f"POST {url}: {exc}") from None
    if not isinstance(data, dict):
        raise ParityError(f"POST {url}: expected a JSON object")
    return data


def tokenize(base_url: str, model: str, text: str, timeout_s: float = 60.0) -> list[int]:
    """Token ids of `text` (with the model's special tokens, e.g. BOS) from the server's /tokenize."""
    data = post(
        f"{root_url(base_url)}/tokenize", {"model": model, "prompt": text, "add_special_tokens": True}, timeout_s
    )
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ParityError(f"{base_url}/tokenize returned no token ids")
    return tokens


def _choice(data: dict[str, Any], url: str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ParityError(f"{url}: completion without choices: {json.dumps(data)[:300]}")
    return choices[0]


def generate(base_url: str, model: str, prompt: Sequence[int], max_tokens: int, top_k: int, timeout_s: float) -> Series:
    """Greedy output of a token-id prompt with the top-k logprobs of every generated position."""
    url = f"{root_url(base_url)}/v1/completions"
    body = {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "logprobs": top_k,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    choice = _choice(post(url, body, timeout_s), url)
    seen = choice.get("prompt_token_ids")
    if isinstance(seen, list) and seen != list(prompt):
        raise ParityError(f"{url}: the server saw {len(seen)} prompt tokens instead of {len(prompt)}")
    try:
        series = series_from_completion(choice.get("logprobs"), url)
    except FidelityError as exc:
        raise ParityError(str(exc)) from None
    ids = choice.get("token_ids")
    if isinstance(ids, list) and [int(t) for t in ids] != [p.token for p in series]:
        raise ParityError(f"{url}: token_ids and logprobs tokens disagree")
    if len(series) != max_tokens:
        raise ParityError(f"{url}: {len(series)} tokens generated, asked for {max_tokens} (ignore_eos)")
    return series


def rescore(
    base_url: str, model: str, prompt: Sequence[int], continuation: Sequence[int], top_k: int, timeout_s: float
) -> Series:
    """Teacher-forced top-k logprobs of `continuation` after `prompt` (one full prefill)."""
    url = f"{root_url(base_url)}/v1/completions"
    body = {
        "model": model,
        "prompt": [*prompt, *continuation],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": top_k,
        "return_tokens_as_token_ids": True,
    }
    choice = _choice(post(url, body, timeout_s), url)
    try:
        return series_from_prompt_logprobs(choice.get("prompt_logprobs"), continuation, len(prompt), url)
    except FidelityError as exc:
        raise ParityError(str(exc)) from None
