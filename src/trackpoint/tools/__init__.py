"""Converting and operating on checkpoints without TensorFlow: safetensors both ways, rewrite, average, merge.

Built on the reader and the streaming bundle writer: every operation holds at most one tensor (or a bounded
buffer of small ones) in memory.
"""
