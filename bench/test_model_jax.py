"""model_jax.py against model.py on the tiny config from the same weights, on
the CPU: loss, adapter gradients and three AdamW steps in fp32, and the loss
under bf16 (autocast in PyTorch). Skipped where torch or JAX is missing:
python3 -m unittest discover -s bench -p 'test_*.py'"""

import importlib.util
import os
import tempfile
import unittest

import numpy as np

HAVE = all(importlib.util.find_spec(m) for m in ("torch", "jax", "optax"))
if HAVE:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import torch

    import model_jax
    from configs import CONFIGS
    from model import LlamaLoRA
    from params_npy import read_params, write_torch_params

    jax.config.update("jax_default_matmul_precision", "highest")


def torch_model(cfg, dtype, seed=0):
    torch.manual_seed(seed)
    model = LlamaLoRA(cfg, dtype=dtype)
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    # PEFT's B starts at zero, which would leave the adapters out of the
    # loss and A's gradient: random B, so both paths are exercised.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B" in n:
                p.normal_(std=0.05)
    return model


def jax_params(model):
    """model's parameters through bench.py's hand-off files."""
    with tempfile.TemporaryDirectory() as d:
        write_torch_params(model, d)
        return read_params(d)


def tokens(cfg, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq + 1), dtype=np.int64)


def torch_loss(model, ids):
    t = torch.from_numpy(ids)
    return model(t[:, :-1], t[:, 1:])


@unittest.skipUnless(HAVE, "torch, jax or optax is not installed")
class JaxMatchesPyTorch(unittest.TestCase):
    def setUp(self):
        self.cfg = CONFIGS["tiny"]

    def test_fp32_loss_and_gradients(self):
        model = torch_model(self.cfg, torch.float32)
        frozen, adapters = jax_params(model)
        self.assertEqual(sorted(adapters), sorted(model_jax.adapter_names(self.cfg)))
        ids = tokens(self.cfg)
        loss = torch_loss(model, ids)
        loss.backward()
        jloss, jgrads = jax.value_and_grad(model_jax.loss_fn)(
            adapters, frozen, jnp.asarray(ids, jnp.int32), self.cfg, "xla")
        self.assertAlmostEqual(float(jloss), loss.item(), delta=1e-4)
        for n, p in model.named_parameters():
            if ".lora_" in n:
                np.testing.assert_allclose(np.asarray(jgrads[n]), p.grad.numpy(),
                                           rtol=1e-3, atol=1e-6, err_msg=n)

    def test_fp32_adamw_steps(self):
        lr = 1e-2  # large enough that three steps move the loss visibly
        model = torch_model(self.cfg, torch.float32)
        frozen, adapters = jax_params(model)
        opt = torch.optim.AdamW(model.adapter_parameters(), lr=lr)
        init, step = model_jax.make_train_step(self.cfg, "xla", lr)
        adapters = {n: jnp.asarray(a) for n, a in adapters.items()}
        state = init(adapters)
        losses, jlosses = [], []
        ids = tokens(self.cfg)  # one batch: the loss falls step by step
        for _ in range(4):
            loss = torch_loss(model, ids)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            adapters, state, jloss = step(adapters, state, frozen, jnp.asarray(ids, jnp.int32))
            jlosses.append(float(jloss))
        self.assertLess(losses[-1], losses[0] - 0.02, losses)
        np.testing.assert_allclose(jlosses, losses, atol=1e-4)
        for n, p in model.named_parameters():
            if ".lora_" in n:
                # 2e-6 apart here; optax's default weight decay (1e-4, not
                # PyTorch's 0.01) would put them 1.5e-4 apart.
                np.testing.assert_allclose(np.asarray(adapters[n]), p.detach().numpy(),
                                           atol=2e-5, err_msg=n)

    def test_bf16_loss(self):
        # The benchmark's precision: bf16 frozen weights, fp32 adapters cast to
        # bf16 for their products (autocast on the PyTorch side). Rounding
        # order differs between the two, so the bound is bf16's, not fp32's.
        model = torch_model(self.cfg, torch.bfloat16)
        frozen, adapters = jax_params(model)
        self.assertEqual(frozen["lm_head.weight"].dtype, jnp.bfloat16)
        self.assertEqual(adapters[model_jax.adapter_names(self.cfg)[0]].dtype, jnp.float32)
        ids = tokens(self.cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch_loss(model, ids)
        jloss = model_jax.loss_fn(adapters, frozen, jnp.asarray(ids, jnp.int32), self.cfg, "xla")
        self.assertAlmostEqual(float(jloss), loss.item(), delta=2e-2)


if __name__ == "__main__":
    unittest.main()
