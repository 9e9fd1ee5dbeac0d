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
nominal   the ImageNet-C fog control
items     COCO item selection, distractors, hashes
depth     metric depth per image (Depth Anything V2 or a named approximation)
render    one condition of one item: degradation, controls, box marker
prompts   questions and prompt templates (spec Table II)
readout   VLM loading and the four read-outs
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
