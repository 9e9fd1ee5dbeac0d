"""murk: how murky must the air or water get before a VLM knows it cannot see?

A research toolkit that puts four read-outs of a vision-language model (answer
accuracy, internal confidence, verbalized confidence, abstention) on one physical
axis, the meteorological visibility V in metres.

Layers
------
The subpackages follow the data flow, bottom up; a layer imports only the layers
above it in this list (``tests/test_modules.py`` holds the order):

``murk.core``      the layout (data/, outputs/, COCO folder), the frozen configuration and its hash,
                   the run settings' schema (``data/workflow.yaml``), file identities, atomic writes, progress
``murk.scene``     Eq. (1) of the spec (fog, underwater), images, metric depth, the ImageNet-C control,
                   one condition of one item rendered
``murk.protocol``  COCO items, distractors and hashes, questions and prompt templates (spec Table II),
                   design variants
``murk.offline``   tiny and real-format offline checkpoints of the real architectures (pipeline checks)
``murk.readout``   the four read-outs: the model and its file checks, the verbal grammar, what a read-out
                   unit asks and records, the batched engine, the whole-prompt reference scorer, hardware
``murk.results``   the cube's schema and stores, metrics, the scores dataset, diagnostics
``murk.monitor``   the visibility monitor and the recalibration by it (beyond the spec)
``murk.report``    formatting, the numbers file, wording of findings and designs, figures, the paper
``murk.pipeline``  markers and stale stores, run identities, locks, executing a stage, the SLURM cluster

The stages themselves (select, depth, readout, monitor, analyse) are the
notebooks under ``notebooks/``.
"""

__version__ = "0.1.0"
