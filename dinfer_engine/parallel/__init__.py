"""The maths of a replica spread over N ranks (docs/adr/011): the process group, the sharded
layers and the vocabulary-split reductions; the rank runtime above it is dinfer_engine/ranks/."""
