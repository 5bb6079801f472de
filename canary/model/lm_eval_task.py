"""Render the local lm-eval ``gsm8k`` task (``gsm8k_local.yaml``) for a data directory.

The YAML is the built-in gsm8k task with ``dataset_path: json`` pointing at local
``train.jsonl`` / ``test.jsonl``; put the returned directory on lm-eval's include path
(``TaskManager(include_path=..., include_defaults=False)``) and ask for task ``gsm8k``.
"""

from __future__ import annotations

import json
from pathlib import Path

TEMPLATE_PATH = Path(__file__).with_name("gsm8k_local.yaml")
DATA_DIR_PLACEHOLDER = "__DATA_DIR__"
TASK_NAME = "gsm8k"


def render_task(data_dir: Path) -> str:
    """The task YAML text reading ``data_dir/{train,test}.jsonl`` (made absolute)."""
    resolved = data_dir.resolve()
    for split in ("train", "test"):
        if not (resolved / f"{split}.jsonl").is_file():
            raise FileNotFoundError(f"{resolved / f'{split}.jsonl'} is missing")
    template = TEMPLATE_PATH.read_text(encoding="utf-8")
    quoted = json.dumps(resolved.as_posix())[1:-1]  # the placeholder sits inside "..."
    return template.replace(DATA_DIR_PLACEHOLDER, quoted)


def write_task(task_dir: Path, data_dir: Path) -> Path:
    """Write ``task_dir/gsm8k.yaml`` for ``data_dir``; return ``task_dir`` (the include path)."""
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / f"{TASK_NAME}.yaml").write_text(render_task(data_dir), encoding="utf-8")
    return task_dir
