# The GDN prefill reference before a0b58ce (dataset/definitions/gdn, commit f519ece), kept
# for docs/measurements/gdn-reference/check.py.
import math

import torch
import torch.nn.functional as F


@torch.no_grad()
def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale):
    """The gated delta rule over variable-length sequences, token by token, in FP32.

    Sequence n covers tokens cu_seqlens[n] .. cu_seqlens[n+1]-1 and starts from
    state[n] (k-last [H, V, K]; missing means zeros). Per token and value head h
    (query/key head h // 2), with S as [K, V]:
      g = exp(-exp(A_log) * softplus(a + dt_bias)),  beta = sigmoid(b)
      S <- g * S;  S <- S + k (x) beta * (v - S^T k);  o = scale * S^T q
    new_state[n] is S after the sequence's last token (the input state for an empty
    sequence). scale 0 or None means 1/sqrt(K). No L2 normalization of q or k.
    """
    tokens, q_heads, dim = q.shape
    v_heads = v.shape[1]
    sequences = cu_seqlens.shape[0] - 1
    scale = 1.0 / math.sqrt(dim) if scale is None or scale == 0 else float(scale)
    group = v_heads // q_heads
    g = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))  # [T, H]
    beta = torch.sigmoid(b.float())
    query = q.float().repeat_interleave(group, dim=1)  # [T, H, K]
    key = k.float().repeat_interleave(group, dim=1)
    value = v.float()
    output = torch.empty((tokens, v_heads, dim), dtype=torch.bfloat16, device=q.device)
    if state is None:
        new_state = torch.zeros(sequences, v_heads, dim, dim, dtype=torch.float32, device=q.device)
    else:
        new_state = state.float().clone()
    bounds = cu_seqlens.tolist()
    for n in range(sequences):
        S = new_state[n].transpose(-1, -2).clone()  # [H, K, V]
        for t in range(bounds[n], bounds[n + 1]):
            S = g[t][:, None, None] * S
            recalled = torch.einsum("hk,hkv->hv", key[t], S)
            S = S + torch.einsum("hk,hv->hkv", key[t], beta[t][:, None] * (value[t] - recalled))
            output[t] = (scale * torch.einsum("hk,hkv->hv", query[t], S)).to(torch.bfloat16)
        new_state[n] = S.transpose(-1, -2)
    return output, new_state
