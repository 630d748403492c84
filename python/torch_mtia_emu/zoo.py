"""The model zoo: small configurations of the model families people train, for the demo
(`scripts/demo --model NAME`), the model tests (tests/python/test_models.py) and the model
benchmark (bench/torch_models.py).

Each entry builds its model from a seed on the CPU (the vision and language models from
HuggingFace `transformers` configs: the code is the library's, no weights are downloaded), makes
the batch of any step from the data seed, and computes the training loss. Dropout is off, so
a device run and a CPU run from the same weights must agree step by step.

    import torch_mtia_emu.zoo as zoo
    m = zoo.get("resnet")
    model = m.build(seed=0)
    x, y = m.batch(step=0)
    loss = m.loss(model, x, y)
"""
import dataclasses
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    description: str
    build: Callable[[int], torch.nn.Module]  # seed -> model on the CPU
    batch: Callable[[int], Tuple[object, torch.Tensor]]  # step -> (inputs, target) on the CPU
    loss: Callable[[torch.nn.Module, object, torch.Tensor], torch.Tensor]
    lr: float = 0.05
    # largest |device loss - CPU loss| of the first step (relative to the loss, at least 1)
    tolerance: float = 1e-4
    # the same after the first update, and for the first step's gradients (relative to each
    # tensor's largest magnitude): float32 sums in another order, over a few layers. A model
    # whose activations clip right after batch norm (MobileNetV2's ReLU6) flips an element's
    # mask on a rounding difference, and one SGD step amplifies that: on the CPU alone, a
    # 1e-6 relative change of the input moves its second loss by 3%.
    step_tolerance: float = 1e-4
    grad_tolerance: float = 1e-3
    # step_tolerance for a compiled step (torch.compile): the compiled graph computes the
    # backward through PyTorch's decompositions, in another order than eager autograd.
    compiled_step_tolerance: Optional[float] = None


def _gen(step: int, seed: int = 1234) -> torch.Generator:
    return torch.Generator().manual_seed(seed + 7919 * step)


def _classify(model, x, y):
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits, y)


# --- the demo's MLP ----------------------------------------------------------------------------

def make_blobs(n: int, features: int, classes: int, seed: int):
    """Gaussian blobs: class c's points scatter around a random centre of its own."""
    g = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(classes, features, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    points = centres[labels] + torch.randn(n, features, generator=g)
    return points, labels


def make_mlp(features: int, hidden: int, classes: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.LayerNorm(hidden), torch.nn.SiLU(),
        torch.nn.Linear(hidden, classes))


def _mlp_batch(step):
    x, y = make_blobs(64, 32, 4, 1000 + step)
    return x, y


# --- vision --------------------------------------------------------------------------------------

def _images(step, n=4, size=32, classes=10):
    g = _gen(step)
    return torch.randn(n, 3, size, size, generator=g), torch.randint(0, classes, (n,), generator=g)


def _resnet(seed):
    import transformers as T
    torch.manual_seed(seed)
    return T.ResNetForImageClassification(T.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10))


def _mobilenet(seed):
    import transformers as T
    torch.manual_seed(seed)
    return T.MobileNetV2ForImageClassification(T.MobileNetV2Config(
        depth_multiplier=0.35, image_size=64, num_labels=10, classifier_dropout_prob=0.0))


def _vit(seed):
    import transformers as T
    torch.manual_seed(seed)
    return T.ViTForImageClassification(T.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=10, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))


# --- language ------------------------------------------------------------------------------------

VOCAB = 100


def _tokens(step, n=4, length=16):
    g = _gen(step)
    return torch.randint(0, VOCAB, (n, length), generator=g)


def _bert(seed):
    import transformers as T
    torch.manual_seed(seed)
    return T.BertForSequenceClassification(T.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _bert_batch(step):
    g = _gen(step)
    return _tokens(step), torch.randint(0, 3, (4,), generator=g)


def _gpt2(seed):
    import transformers as T
    torch.manual_seed(seed)
    return T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def _gpt2_batch(step):
    t = _tokens(step)
    return t, t  # next-token prediction on the sequence itself


def _gpt2_loss(model, x, y):
    logits = model(x).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1))


class TransformerClassifier(torch.nn.Module):
    """nn.TransformerEncoder over embedded tokens, mean-pooled into a classifier."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


def _transformer(seed):
    torch.manual_seed(seed)
    return TransformerClassifier()


class LSTMClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out[:, -1])


def _lstm(seed):
    torch.manual_seed(seed)
    return LSTMClassifier()


# --- recommendation --------------------------------------------------------------------------------

class DLRM(torch.nn.Module):
    """A DLRM-shaped model: embedding bags for the sparse features, a bottom MLP for the dense
    ones, their pairwise dot products, and a top MLP that scores the click."""

    def __init__(self, tables=(50, 40, 30), dim=16, dense=8):
        super().__init__()
        self.bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(n, dim, mode="sum") for n in tables)
        self.bottom = torch.nn.Sequential(torch.nn.Linear(dense, 32), torch.nn.ReLU(),
                                          torch.nn.Linear(32, dim), torch.nn.ReLU())
        f = len(tables) + 1
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + f * (f - 1) // 2, 32),
                                       torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.register_buffer("pairs", torch.triu_indices(f, f, 1), persistent=False)

    def forward(self, inputs):
        dense, sparse = inputs
        d = self.bottom(dense)
        feats = [d] + [bag(idx, off) for bag, (idx, off) in zip(self.bags, sparse)]
        z = torch.stack(feats, 1)                        # [batch, features, dim]
        dots = torch.bmm(z, z.transpose(1, 2))           # every pair's dot product
        inter = dots[:, self.pairs[0], self.pairs[1]]    # the upper triangle
        return self.top(torch.cat([d, inter], 1)).squeeze(1)


def _dlrm(seed):
    torch.manual_seed(seed)
    return DLRM()


def _dlrm_batch(step, n=8):
    g = _gen(step)
    dense = torch.randn(n, 8, generator=g)
    sparse = []
    for rows in (50, 40, 30):
        lengths = torch.randint(1, 4, (n,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        sparse.append((torch.randint(0, rows, (int(lengths.sum()),), generator=g), offsets))
    return (dense, sparse), torch.randint(0, 2, (n,), generator=g).float()


def _dlrm_loss(model, x, y):
    return F.binary_cross_entropy_with_logits(model(x), y)


MODELS: Dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("mlp", "the demo's MLP: Linear, ReLU, LayerNorm, SiLU (32-128-128-4)",
             lambda seed: make_mlp(32, 128, 4, seed), _mlp_batch, _classify, lr=0.1),
    ZooModel("resnet", "ResNet (transformers, 2 stages of basic blocks, 16-32 channels, 32x32)",
             _resnet, _images, _classify, tolerance=2e-4, step_tolerance=2e-3,
             grad_tolerance=2e-3),
    ZooModel("mobilenet", "MobileNetV2 (transformers, depth multiplier 0.35, 64x64)",
             _mobilenet, lambda step: _images(step, size=64), _classify, lr=1e-3,
             tolerance=2e-4, step_tolerance=2e-3, grad_tolerance=0.1,
             compiled_step_tolerance=0.05),
    ZooModel("vit", "VisionTransformer (transformers, 2 layers, width 32, patches of 8)",
             _vit, _images, _classify),
    ZooModel("bert", "BERT for sequence classification (transformers, 2 layers, width 32)",
             _bert, _bert_batch, _classify),
    ZooModel("gpt2", "GPT-2 language model (transformers, 2 layers, width 32)",
             _gpt2, _gpt2_batch, _gpt2_loss),
    ZooModel("transformer", "nn.TransformerEncoder classifier (2 layers, width 32, 4 heads)",
             _transformer, _bert_batch, _classify),
    ZooModel("lstm", "2-layer LSTM classifier (width 32)", _lstm, _bert_batch, _classify),
    ZooModel("dlrm", "DLRM-style recommender: 3 embedding bags, bottom/top MLPs, dot "
             "interaction", _dlrm, _dlrm_batch, _dlrm_loss),
]}


def get(name: str) -> ZooModel:
    if name not in MODELS:
        raise ValueError(f"no model {name!r} in the zoo; choose one of {', '.join(MODELS)}")
    return MODELS[name]


def to_device(x, device):
    """Moves a batch (tensors in nested tuples and lists) to `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x
