"""A tiny BERT checkpoint with the original Google BERT's variable names, written by TF1's ``Saver``
(as ``run_pretraining.py`` wrote them), for the transformers tests in ``tests/compat``.

Writes ``bert_model.ckpt`` and ``bert_config.json`` into a directory, as the original releases ship them.
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

CONFIG = {
    "vocab_size": 32,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}


def _shapes() -> dict[str, tuple[int, ...]]:
    """Every variable of the original BERT pre-training graph at :data:`CONFIG`'s sizes."""
    h, i, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/token_type_embeddings": (CONFIG["type_vocab_size"], h),
        "bert/embeddings/position_embeddings": (CONFIG["max_position_embeddings"], h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
        "cls/predictions/transform/dense/kernel": (h, h),
        "cls/predictions/transform/dense/bias": (h,),
        "cls/predictions/transform/LayerNorm/gamma": (h,),
        "cls/predictions/transform/LayerNorm/beta": (h,),
        "cls/predictions/output_bias": (v,),
        "cls/seq_relationship/output_weights": (2, h),
        "cls/seq_relationship/output_bias": (2,),
    }
    for layer in range(CONFIG["num_hidden_layers"]):
        at = f"bert/encoder/layer_{layer}"
        for name in ("query", "key", "value"):
            shapes[f"{at}/attention/self/{name}/kernel"] = (h, h)
            shapes[f"{at}/attention/self/{name}/bias"] = (h,)
        shapes[f"{at}/attention/output/dense/kernel"] = (h, h)
        shapes[f"{at}/attention/output/dense/bias"] = (h,)
        shapes[f"{at}/intermediate/dense/kernel"] = (h, i)
        shapes[f"{at}/intermediate/dense/bias"] = (i,)
        shapes[f"{at}/output/dense/kernel"] = (i, h)
        shapes[f"{at}/output/dense/bias"] = (h,)
        for norm in (f"{at}/attention/output/LayerNorm", f"{at}/output/LayerNorm"):
            shapes[f"{norm}/gamma"] = (h,)
            shapes[f"{norm}/beta"] = (h,)
    return shapes


def write(directory: str) -> str:
    """Write the checkpoint (with the optimizer's ``adam_m``/``adam_v`` and ``global_step``, which
    loaders skip) and its config into ``directory``; return the checkpoint prefix."""
    rng = np.random.default_rng(2018)
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        for name, shape in _shapes().items():
            value = rng.standard_normal(shape).astype(np.float32)
            v1.get_variable(name, initializer=value)
            v1.get_variable(f"{name}/adam_m", initializer=np.zeros(shape, np.float32), trainable=False)
            v1.get_variable(f"{name}/adam_v", initializer=np.zeros(shape, np.float32), trainable=False)
        v1.train.get_or_create_global_step()
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(session, os.path.join(directory, "bert_model.ckpt"), write_meta_graph=False)
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    return prefix


if __name__ == "__main__":  # python -m tests.interop.tf_side.bert tests/golden/bert_tf1
    import sys

    os.makedirs(sys.argv[1], exist_ok=True)
    write(sys.argv[1])
    os.remove(os.path.join(sys.argv[1], "checkpoint"))  # names the absolute path it was written at
