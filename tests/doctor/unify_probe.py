"""Run in a vLLM venv: vLLM's own ``unify_kv_cache_spec_page_size`` on a hybrid model's pages.

``python unify_probe.py '[[t_kv, t_dim, d_kv, d_dim], ...]'`` prints, for each case, ``ok`` or
the name of what vLLM raised: the target's attention page, the Mamba page padded to it (what
vLLM's hybrid alignment makes) and the drafter's attention page, all at one block size.
"""

import json
import sys

import torch
from vllm.v1.core.kv_cache_utils import unify_kv_cache_spec_page_size
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

BLOCK = 64
out = []
for t_kv, t_dim, d_kv, d_dim in json.loads(sys.argv[1]):
    target = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=t_kv, head_size=t_dim, dtype=torch.bfloat16
    )
    mamba = MambaSpec(
        block_size=BLOCK,
        shapes=((4, 8),),
        dtypes=(torch.bfloat16,),
        page_size_padded=target.page_size_bytes,
    )
    drafter = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=d_kv, head_size=d_dim, dtype=torch.bfloat16
    )
    try:
        unify_kv_cache_spec_page_size({"target": target, "mamba": mamba, "drafter": drafter})
        out.append("ok")
    except Exception as exc:  # what the engine would die of
        out.append(type(exc).__name__)
print(json.dumps(out))
