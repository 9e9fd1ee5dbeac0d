"""murk: how murky must the air or water get before a VLM knows it cannot see?

A research toolkit that puts four read-outs of a vision-language model (answer
accuracy, internal confidence, verbalized confidence, abstention) on one physical
axis, the meteorological visibility V in metres.

Modules
-------
paths     the one place that knows the layout (data/, outputs/, COCO folder)
config    the frozen study configuration (data/config.yaml) and its hash
settings  the run settings' schema (data/workflow.yaml): checked before anything runs
physics   Eq. (1) of the spec: fog (Koschmieder) and underwater (Pope-Fry)
images    reading, checking and resizing image files (the presented size)
nominal   the ImageNet-C fog control
items     COCO item selection, distractors, hashes
depth     metric depth per image (Depth Anything V2 or a named approximation)
render    one condition of one item: degradation, controls, box marker
prompts   questions and prompt templates (spec Table II)
architectures  the study models' published configurations; one accessor for per-layer config values
vlm       the model and its inputs: loading and its refusals, presentation, option tokens, kernels
verbal    the verbal-confidence grammar and how a continuation ended
unit      what a read-out unit asks and records (the four read-outs), the option-mass guard
engine    the batched read-out engine (the read-out stage's)
whole     every prompt run whole: the reference scorer and the engine's fallback
baseline  the per-unit shared-prefix engine: the benchmarks' baseline, off the production path
readout   the read-out's public names, re-exported from the rooms above
checkpoints  tiny offline checkpoints of the real architectures
cube      the schema of the result cube (dims, coordinates, units)
metrics   accuracy, bootstrap, crossing visibility, blind-spot width
analysis  the scores dataset: every statistic from one paired bootstrap
claims    findings as decisions on the scores (stated only where the cube supports them)
figures   plotting functions: data in, figure out
monitor   the visibility monitor (beyond the spec)
paper     the numbers file, the formatting layer, the paper's conversion

The stages themselves (select, depth, readout, monitor, analyse) are the
notebooks under ``notebooks/``.
"""

__version__ = "0.1.0"
