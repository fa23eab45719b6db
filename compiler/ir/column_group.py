"""A site's output columns grouped by their epilogue: what `build_columns` makes.

A `ColumnGroup` is columns sharing one epilogue (`before` over the accumulator, the NPU's
`post`). A per-channel op's columns after the first are `FilledGroup`s of one `FilledRun`:
each one's `before` is a template filled with its scale and its post the run's but for its
float32 scale, both made only when read (most never are: a family proves them from their
scales, and the fused node's epilogue is a `ColumnPosts` of the run's scales).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import is_
from typing import Any

from npu_backend.postprocess import PostProcess
from prover.family import fill
from prover.terms import Term, Var, op


@dataclass
class ColumnGroup:
    """Output columns sharing one epilogue: `before`/`post` over `Var('acc')`."""

    columns: tuple[int, ...]
    before: Term
    post: PostProcess
    acc_offset: int = 0  # a bias folded into the accumulator (added before `post`)

    def after(self, acc: Term) -> Term:
        """The fused form over the original accumulator `acc`."""
        if self.acc_offset:
            acc = op("add_const", acc, c=int(self.acc_offset))
        return self.post_term(acc)

    def post_term(self, acc: Term) -> Term:
        """`epilogue_term(self.post, acc)`, kept on the group for its current `post` and the
        last `acc` (the obligations and the fused node ask for the same one; a model's
        columns outnumber `epilogue_term`'s cache)."""
        memo = getattr(self, "_post_term", None)  # not `__dict__`: see `prover.terms._memo`
        if (
            memo is not None
            and memo[0] is self.post
            and (memo[1] is acc or (type(acc) is Var and memo[1] == acc))
        ):
            return memo[2]
        t = epilogue_term(self.post, acc)
        self._post_term = (self.post, acc, t)
        return t


class FilledGroup(ColumnGroup):
    """A bias-free per-channel group whose `before` is `template` with its hole filled by
    `scale` (`prover.family.fill`), built on first read: a family proves such groups from
    the scale alone (`compiler.proving.families.site_family`), so most are never built.
    A member of a `FilledRun` made without its post has `run.proto` with the float32 scale
    `after_scale` as its post, also made on first read (the fused node's epilogue reads the
    run's scales: `compiler.ir.fuse.post_of`). Built as a `ColumnGroup` (a given `before`,
    as `dataclasses.replace` does), it is one."""

    template: Term | None
    scale: float
    run: FilledRun | None = None  # the groups `build_columns` filled with this one
    after_scale: float | None = None  # without a post: its requantizer's (float32) scale

    def __init__(
        self,
        columns: tuple[int, ...],
        before: Term | None = None,
        post: PostProcess | None = None,
        acc_offset: int = 0,
        *,
        template: Term | None = None,
        scale: float = 0.0,
        run: FilledRun | None = None,
        after_scale: float | None = None,
    ) -> None:
        assert (before is None) != (template is None)
        assert (post is None) == (after_scale is not None) and (post is not None or run)
        self.columns, self.acc_offset = columns, acc_offset
        self.template, self.scale = template, scale
        if post is not None:
            self.post = post
        else:
            self.after_scale = after_scale
        if before is not None:
            self.before = before
        if run is not None:
            self.run = run

    @classmethod
    def of_run(cls, run: FilledRun) -> list[FilledGroup]:
        """`run`'s groups, without their posts, made at once (as `__init__` makes each, in
        its order of fields: a per-channel op has thousands)."""
        new, template, out = object.__new__, run.template, []
        for cols, scale, after in zip(run.columns, run.fill_scales, run.after_scales, strict=True):
            g = new(cls)
            g.columns, g.acc_offset, g.template, g.scale = cols, 0, template, scale
            g.after_scale, g.run = after, run
            out.append(g)
        return out

    def __getattr__(self, name: str) -> Any:
        # only reached while `before` or `post` is not in the instance: made on first read
        if name == "before" and self.template is not None:
            before = fill(self.template, self.scale)
            self.before = before
            return before
        if name == "post" and self.run is not None and self.after_scale is not None:
            proto = self.run.proto
            post = proto.with_requants(proto.requant.with_scales([self.after_scale]))[0]
            self.post = post
            return post
        raise AttributeError(name)


def post_parts(grp: ColumnGroup) -> tuple[PostProcess, float | None]:
    """(a post that is the group's but for its requantization scale, that scale), read
    without making a `FilledGroup`'s post where it is not made yet."""
    if isinstance(grp, FilledGroup) and "post" not in grp.__dict__ and grp.run is not None:
        return grp.run.proto, grp.after_scale
    return grp.post, grp.post.requant.scale


@dataclass(eq=False)
class FilledRun:
    """The groups `build_columns` filled from one template, in order, as it made them, where
    every post is `proto` but for its float32 requantizer's scale: each group's `scale`
    (`fill_scales`), its post's requantization scale (`after_scales`) and its columns
    (`compiler.proving.families.site_family` reads a run at once where its groups still
    stand in a site's list as made)."""

    template: Term
    proto: PostProcess
    fill_scales: list[float]
    after_scales: list[float]
    columns: list[tuple[int, ...]]
    groups: list[FilledGroup] = field(default_factory=list)

    def stands_at(self, groups: Sequence[Any], at: int) -> bool:
        """Whether `groups[at:]` starts with this run's groups, the same objects in order
        (none replaced since `build_columns` made them)."""
        n = len(self.groups)
        return n > 0 and all(map(is_, groups[at : at + n], self.groups))


@lru_cache(maxsize=4096)
def epilogue_term(post: PostProcess, acc: Term) -> Term:
    """`post.epilogue_term(acc)`, built once per distinct postprocessing (sites share them)."""
    return post.epilogue_term(acc)
