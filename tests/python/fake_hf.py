"""Stand-ins for torch, transformers, a causal LM and a fast tokenizer: just what kvsim.dump
calls, so its whole path (prompts, tokenizer, generation, recording, writing) runs where
neither torch nor transformers is installed. installed() puts them in sys.modules for the
length of a with block."""

import contextlib
import re
import sys
import types
from unittest import mock

import numpy as np


class FakeTensor:
    """Just enough of a torch tensor: shape, indexing, .float().cpu().numpy(), .tolist()."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.shape = self.a.shape

    def __getitem__(self, i):
        return FakeTensor(self.a[i])

    def float(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a

    def tolist(self):
        return self.a.tolist()


class FastTokenizer:
    """A fast tokenizer's interface: a token is "\\n" or up to 4 characters of a word (so
    "7391." is "7391" and "."), the spaces between words belong to no token; ids in order
    of first sight from 3 (0 pad, 1 BOS, 2 EOS), at most VOCAB."""

    VOCAB = 64

    def __init__(self, is_fast=True, bos_token_id=1):
        self.is_fast, self.bos_token_id = is_fast, bos_token_id
        self.words = ["<pad>", "<s>", "</s>"]

    def __len__(self):
        return self.VOCAB

    def _id(self, word):
        if word not in self.words:
            self.words.append(word)
        assert len(self.words) <= self.VOCAB, "FastTokenizer: vocabulary full"
        return self.words.index(word)

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        if return_offsets_mapping and not self.is_fast:
            raise NotImplementedError("return_offset_mapping is not available with a slow tokenizer")
        found = list(re.finditer(r"\n|[^\s]{1,4}", text))
        ids = [self._id(m.group()) for m in found]
        out = {"input_ids": ([self.bos_token_id] if add_special_tokens and self.bos_token_id else []) + ids}
        if return_offsets_mapping:
            out["offset_mapping"] = [(m.start(), m.end()) for m in found]
        return out

    def convert_ids_to_tokens(self, ids):
        return [self.words[i] if i < len(self.words) else f"<{i}>" for i in ids]

    def decode(self, ids):
        return "".join(self.convert_ids_to_tokens(ids))


class CausalLM:
    """A model whose attention modules hand random (seeded by the tokens) q, k, v to the
    registered attention function, and whose greedy continuation of t is (7 t + 3) mod VOCAB."""

    def __init__(self, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8):
        self.config = types.SimpleNamespace(
            num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, head_dim=head_dim,
            hidden_size=n_heads * head_dim, num_hidden_layers=n_layers, _attn_implementation="eager")
        self.generation_config = types.SimpleNamespace(pad_token_id=0, eos_token_id=None)
        self.attention = [types.SimpleNamespace(layer_idx=l, scaling=head_dim ** -0.5) for l in range(n_layers)]
        self.forwards = []  # the token ids of every forward pass

    def eval(self):
        return self

    def to(self, device):
        return self

    def parameters(self):
        yield types.SimpleNamespace(device="cpu")

    def modules(self):
        return iter(self.attention)

    def generate(self, input_ids, max_new_tokens, **kwargs):
        ids = input_ids.tolist()[0]
        for _ in range(max_new_tokens):
            ids.append((7 * ids[-1] + 3) % FastTokenizer.VOCAB)
        return FakeTensor([ids])

    def base_model(self, input_ids, use_cache):
        from kvsim import dump
        tokens = input_ids.tolist()[0]
        self.forwards.append(tokens)
        c = self.config
        rng = np.random.default_rng(sum(tokens) + len(tokens))
        n = len(tokens)
        for module in self.attention:
            q = rng.standard_normal((1, c.num_attention_heads, n, c.head_dim))
            k, v = (rng.standard_normal((1, c.num_key_value_heads, n, c.head_dim)) for _ in range(2))
            dump.kvsim_dump_attention(module, FakeTensor(q), FakeTensor(k), FakeTensor(v), None,
                                      scaling=module.scaling)


def _loader(make):
    return types.SimpleNamespace(from_pretrained=lambda name, **kwargs: make())


@contextlib.contextmanager
def installed(model=None, tokenizer=None):
    """torch and transformers stand-ins in sys.modules; AutoModelForCausalLM hands out model
    (loads counts its calls), AutoTokenizer tokenizer (or fails as for a model without one)."""
    torch = types.ModuleType("torch")
    torch.tensor = lambda data, device=None: FakeTensor(data)
    torch.ones_like = lambda t: FakeTensor(np.ones_like(t.a))
    torch.no_grad = contextlib.nullcontext
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    torch.float16, torch.bfloat16, torch.float32 = "float16", "bfloat16", "float32"
    tr = types.ModuleType("transformers")
    tr.__version__ = "4.57.0"
    tr.AttentionInterface = types.SimpleNamespace(register=lambda name, fn: None)
    loads = []

    def load_model():
        loads.append(1)
        return model

    def load_tokenizer():
        if tokenizer is None:
            raise OSError("no tokenizer here")
        return tokenizer

    tr.AutoConfig = _loader(lambda: model.config)
    tr.AutoModelForCausalLM = _loader(load_model)
    tr.AutoTokenizer = _loader(load_tokenizer)
    utils = types.ModuleType("transformers.modeling_utils")
    utils.ALL_ATTENTION_FUNCTIONS = {"sdpa": lambda *args, **kwargs: (None, None)}
    with mock.patch.dict(sys.modules, {"torch": torch, "transformers": tr, "transformers.modeling_utils": utils}):
        yield loads
