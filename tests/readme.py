"""The README's blocks as the tests read them: its opening bash commands, and a section's python."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    assert block, "the README starts with a bash block"
    return [line for line in block[1].splitlines() if line.strip()]


def readme_python_block(heading: str) -> str:
    """The first python block of the README's section whose heading starts with ``## heading``."""
    pattern = rf"^## {re.escape(heading)}.*?\n(.*?)^## "
    section = re.search(pattern, README.read_text(), re.DOTALL | re.MULTILINE)
    assert section, f"the README has a section '{heading}'"
    block = re.search(r"```python\n(.*?)```", section[1], re.DOTALL)
    assert block, f"the section '{heading}' shows a python block"
    return block[1]
