"""A result's type flows from the job's return annotation: mypy infers ``int`` for the result
of a job annotated ``-> int``, sync or async, with or without options, pushed or awaited."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api

SOURCE = """
    import wurk

    @wurk.job
    def add(a: int, b: int) -> int:
        return a + b

    @wurk.job(result_ttl=60, queue="low")
    async def aadd(a: int, b: int) -> int:
        return a + b

    @wurk.job(result_ttl=60)
    def title(n: int) -> dict[str, str]:
        return {"n": str(n)}

    handle = add.perform_async(1, 2)
    assert handle is not None
    reveal_type(handle)
    reveal_type(handle.result(timeout=5))
    reveal_type(add.set(queue="x").perform_in(5, 1, 2))
    reveal_type(title.perform_bulk([[1]]))
    reveal_type(add(1, 2))

    async def main() -> None:
        reveal_type(await aadd(1, 2))  # called, still the coroutine function it was
        ahandle = await aadd.aperform_async(1, 2)
        assert ahandle is not None
        reveal_type(await ahandle)
        reveal_type(await ahandle.aresult(timeout=5))
        other = title.perform_async(1)
        assert other is not None
        reveal_type(other.result())

    text: str = add.perform_async(1, 2) or ""  # a handle is still a str
    wrong: str = handle.result()  # an int is not a str
"""

EXPECTED = [
    "wurk.results.handle.ResultHandle[int]",
    "int",
    "wurk.results.handle.ResultHandle[int] | None",
    "list[wurk.results.handle.ResultHandle[dict[str, str]] | None]",
    "int",
    "int",
    "int",
    "int",
    "dict[str, str]",
]


def test_mypy_infers_the_result_type_from_the_jobs_annotation(tmp_path: Path) -> None:
    source = tmp_path / "typed_results.py"
    source.write_text(textwrap.dedent(SOURCE))
    out, err, _status = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path),
                                 "--python-version", "3.10", str(source)])
    # mypy's releases differ in spelling: "builtins.int" or "int", "Union[X, None]" or "X | None"
    revealed = [re.sub(r"^Union\[(.*), None\]$", r"\1 | None", m.replace("builtins.", ""))
                for m in re.findall(r'Revealed type is "(.*)"', out)]
    assert revealed == EXPECTED, out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1, out
    assert 'Incompatible types in assignment (expression has type "int", variable has type ' \
           '"str")' in errors[0]
