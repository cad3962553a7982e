"""An IRModule: the model as one `main` Function plus the names of its inputs and outputs.

Named as TVM's: the graph before compilation. The compiled model a user runs is `runtime.Module`."""
from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Function, Tuple, astext
from .types import TupleType


@dataclass(frozen=True)
class IRModule:
    main: Function
    output_names: tuple[str, ...] = ()
    attrs: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if not self.output_names:
            n = len(self.main.ret_type.fields) if isinstance(self.main.ret_type, TupleType) else 1
            object.__setattr__(self, "output_names", tuple(f"output{i}" for i in range(n)))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.main.params)

    @property
    def outputs(self) -> tuple:
        body = self.main.body
        return body.fields if isinstance(body, Tuple) else (body,)

    def with_main(self, main: Function) -> "IRModule":
        return IRModule(main, self.output_names, dict(self.attrs))

    def astext(self, show_types: bool = True) -> str:
        """The text of main, then the output names."""
        return astext(self.main, show_types) + f"\n/* outputs: {', '.join(self.output_names)} */"

    def __str__(self):
        return self.astext()
