"""A parallel training plan: the choices, the solved graphs, and how layers map to stages.

`Choice` is what the search picks (and the user may fix): data/tensor/pipeline/context
parallel degrees, ZeRO stage, microbatch size and count, pipeline schedule (with `virtual`
chunks per stage for the interleaved one) and recompute mode. `Plan` joins a choice to the
mesh laid over the cluster and to the three solved graphs (embedding, one transformer layer,
head); `stage_program(plan, stage)` prints what one device of a stage runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from cherenkov.ir.placement import Shard
from cherenkov.parallel.mesh import ClusterMesh


@dataclass(frozen=True)
class Choice:
    dp: int
    tp: int
    pp: int
    cp: int
    zero_stage: int
    microbatch_size: int
    num_microbatches: int
    schedule: str          # gpipe | 1f1b | interleaved
    virtual: int           # model chunks per stage (interleaved), else 1
    recompute: str         # none | selective | full

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} cp={self.cp} zero={self.zero_stage} "
                f"mb={self.microbatch_size}x{self.num_microbatches} {self.schedule}"
                f"{f'(v={self.virtual})' if self.virtual > 1 else ''} recompute={self.recompute}")


@dataclass
class Plan:
    model: object          # ModelConfig or CapturedModel
    cluster: object
    global_batch: int
    seq: int
    choice: Choice
    mesh: ClusterMesh
    layer: object          # LayerSolution of one transformer layer on the tp axis
    embed: object          # LayerSolution of the embedding
    head: object           # LayerSolution of final norm + LM head + cross-entropy
    virtual_layers: list[int]  # layers of each virtual stage, in pipeline order

    def chunk_layers(self, stage: int, chunk: int) -> int:
        return self.virtual_layers[chunk * self.choice.pp + stage]

    def stage_layers(self, stage: int) -> int:
        return sum(self.chunk_layers(stage, c) for c in range(self.choice.virtual))

    def outer_placements(self, tp_placement) -> str:
        """An activation's placement over the mesh: dp splits the batch, cp the sequence."""
        by_axis = {"dp": Shard(0), "cp": Shard(1), "tp": tp_placement}
        parts = [f"{a.name}:{by_axis[a.name]}" for a in self.mesh.axes
                 if a.size > 1 and a.name in by_axis]
        return " ".join(parts) or "R"


def split_layers(layers: int, parts: int) -> list[int]:
    """Layers per virtual stage: as even as possible, the extra ones on the middle stages."""
    if parts > layers:
        raise ValueError(f"cannot split {layers} layers into {parts} pipeline chunks")
    sizes = [layers // parts] * parts
    extra = layers % parts
    start = (parts - extra) // 2
    for i in range(extra):
        sizes[start + i] += 1
    return sizes


def stage_program(plan: Plan, stage: int) -> str:
    """The per-device program of one pipeline stage: ops with placements and collectives."""
    c = plan.choice
    lines = [f"stage {stage}/{c.pp}: {plan.stage_layers(stage)} layers"
             f"{' + embedding' if stage == 0 else ''}{' + head' if stage == c.pp - 1 else ''}"
             f"  ({plan.mesh.mesh}, per device, one microbatch of {c.microbatch_size})"]
    parts = []
    if stage == 0:
        parts.append(("embedding", plan.embed, 1))
    parts.append(("layer", plan.layer, plan.stage_layers(stage)))
    if stage == c.pp - 1:
        parts.append(("head", plan.head, 1))
    for title, sol, count in parts:
        lines.append(f"  {title}{f' x{count}' if count > 1 else ''}:")
        lines.extend("    " + ln for ln in format_solution(plan, sol))
    return "\n".join(lines)


def format_solution(plan: Plan, sol) -> list[str]:
    out = []
    for phase, items in (("fwd", sol.forward), ("bwd", sol.backward)):
        for it in items:
            if it[0] == "compute":
                s = sol.chosen[it[1]]
                out.append(f"{phase} {it[1]:<8} {s.name:<10} {plan.outer_placements(s.output):<24}"
                           f" {it[2] * 1e3:8.3f} ms")
            else:
                out.append(f"{phase}   {str(it[1])}")
    for coll in sol.step_comm:
        out.append(f"step  {coll}  (weight-gradient sync)")
    return out
