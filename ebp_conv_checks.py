"""References for the convolutional EBP layer (ebp_conv): the same network as a loop over positions, and
finite differences of ln P with every σ² frozen. The tests and notebooks/11_convolutional_ebp.ipynb check
ebp_lib's convolutional layers against them; nothing trains with them."""
from __future__ import annotations

import numpy as np
from scipy import special

import ebp_conv
import ebp_lib


def dense_equivalent(net):
    """The ebp_lib network whose convolutional layers are replaced by the locally connected layers they equal
    (unrolled kernels, masks "absent", one bias per unit): same μ, σ², Δ; its increments fold onto the kernels."""
    layers = []
    for layer in net.layers:
        if layer.conv is None:
            layers.append(ebp_lib.Layer(layer.h.copy(), layer.b.copy(), layer.mask, layer.held))
        else:
            h, mask = ebp_conv.unrolled(layer.h, layer.conv)
            layers.append(ebp_lib.Layer(h, ebp_conv.per_unit(layer.b, layer.conv), mask.astype(h.dtype)))
    return ebp_lib.Network(layers, net.weights, ["dense equivalent of", net.architecture], net.input_side,
                           net.dropout, net.keep, net.mask_reading, net.real_update)


def frozen_log_likelihood(net, fwd, y, k: int, m: np.ndarray) -> float:
    """ln P(y) = Σ ln Φ(y μ_L/σ_L) as a function of layer k's mean weights m = ⟨W_k⟩ (numbered from 0), every σ²
    held at the values of the forward pass `fwd` (ebp_lib.forward, no dropout): the function whose gradient EBP's
    increment is (notebook 10). For finite differences on small networks."""
    nu = fwd.inputs[k]
    for j in range(k, len(net.layers)):
        w_mean = m if j == k else fwd.w_mean[j]
        mu = ebp_lib.mean_input(net.layers[j], nu, w_mean)
        nu = special.erf(mu / np.sqrt(2.0 * fwd.sigma2[j]))
    return float(np.sum(special.log_ndtr(y * mu / np.sqrt(fwd.sigma2[-1]))))


def numerical_increment(net, fwd, y, k: int, eps: float = 1e-6) -> np.ndarray:
    """∂ln P/∂⟨W_k⟩ of every weight of layer k by central differences of frozen_log_likelihood (error O(ε²))."""
    base, grad = fwd.w_mean[k], np.zeros_like(fwd.w_mean[k])
    for idx in np.ndindex(base.shape):
        up, down = base.copy(), base.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (frozen_log_likelihood(net, fwd, y, k, up) - frozen_log_likelihood(net, fwd, y, k, down)) / (2 * eps)
    return grad
