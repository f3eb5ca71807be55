"""A tanh multilayer perceptron trained by backpropagation: the baseline EBP is compared with.

Plain numpy, float32, one idea per function, so that every step of the baseline can be read and checked
(tests/test_backprop.py checks `gradients` against finite differences of `loss`):

    a_0 = x,   a_l = tanh(a_{l-1} W_l + b_l)   (hidden layers),   z = a_{L-1} W_L + b_L,   p = softmax(z)
    loss = mean over the batch of -ln p_y  +  l2 · Σ_l ΣW_l²           (biases are not penalised)

trained by minibatch SGD with Nesterov momentum (Sutskever et al. 2013, in the form scikit-learn and Keras use):
v ← μ v - η g,  θ ← θ + μ v - η g. Initialisation: Glorot-uniform weights, U(±sqrt(6 / (fan_in + fan_out))),
zero biases (the Theano tutorial behind the paper's quoted 1.65 %).

The network's state is a dict of named float32 arrays (W1, b1, W2, b2, ...), so that a checkpoint is a plain
.npz file and no pickle is ever needed.
"""
from __future__ import annotations

import numpy as np

N_CLASSES = 10


def layer_names(n_layers: int) -> list[tuple[str, str]]:
    """[("W1", "b1"), ..., ("WL", "bL")]: the arrays of each layer, input side first."""
    return [(f"W{i}", f"b{i}") for i in range(1, n_layers + 1)]


def init_mlp(sizes: tuple[int, ...], rng: np.random.Generator, dtype=np.float32) -> dict[str, np.ndarray]:
    """Glorot-uniform weights and zero biases for layer sizes (n_in, hidden..., n_out)."""
    params = {}
    for (w, b), fan_in, fan_out in zip(layer_names(len(sizes) - 1), sizes[:-1], sizes[1:]):
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        params[w] = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(dtype)
        params[b] = np.zeros(fan_out, dtype=dtype)
    return params


def n_layers(params: dict[str, np.ndarray]) -> int:
    return sum(1 for name in params if name.startswith("W"))


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Hidden activations a_1..a_{L-1} (a_0 = x first in the list) and the output logits z."""
    activations = [x]
    names = layer_names(n_layers(params))
    for w, b in names[:-1]:
        activations.append(np.tanh(activations[-1] @ params[w] + params[b]))
    w, b = names[-1]
    return activations, activations[-1] @ params[w] + params[b]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def loss(params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray, l2: float = 0.0) -> float:
    """Mean cross-entropy of the batch plus l2 · ΣW² (the objective `gradients` differentiates)."""
    _, z = forward(params, x)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    penalty = sum(float(np.sum(np.square(params[w]))) for w, _ in layer_names(n_layers(params)))
    return float(-np.mean(log_p[np.arange(len(labels)), labels])) + l2 * penalty


def gradients(params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray,
              l2: float = 0.0) -> tuple[dict[str, np.ndarray], float]:
    """∂loss/∂θ for every array of `params`, by backpropagation, and the batch's mean cross-entropy.

    At the output ∂loss/∂z = (p - onehot(y)) / B; through a tanh layer δ_{l-1} = (δ_l W_lᵀ) ⊙ (1 - a_{l-1}²).
    """
    activations, z = forward(params, x)
    rows = np.arange(len(labels))
    delta = softmax(z)
    cross_entropy = float(-np.mean(np.log(np.maximum(delta[rows, labels], np.finfo(delta.dtype).tiny))))
    delta[rows, labels] -= 1.0
    delta /= len(labels)
    grads = {}
    names = layer_names(n_layers(params))
    for i in range(len(names) - 1, -1, -1):
        w, b = names[i]
        a = activations[i]
        grads[w] = a.T @ delta + (2.0 * l2) * params[w]
        grads[b] = delta.sum(axis=0)
        if i > 0:
            delta = (delta @ params[w].T) * (1.0 - np.square(a))
    return grads, cross_entropy


def nesterov_step(params: dict[str, np.ndarray], velocity: dict[str, np.ndarray], grads: dict[str, np.ndarray],
                  learning_rate: float, momentum: float) -> None:
    """One SGD step with Nesterov momentum, in place: v ← μv - ηg; θ ← θ + μv - ηg."""
    for name, g in grads.items():
        step = learning_rate * g
        velocity[name] *= momentum
        velocity[name] -= step
        params[name] += momentum * velocity[name] - step


def train_epoch(params: dict[str, np.ndarray], velocity: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray,
                order: np.ndarray, batch_size: int, learning_rate: float, momentum: float, l2: float) -> float:
    """One pass over the images in `order`, minibatch by minibatch; returns the epoch's mean cross-entropy
    (each minibatch's before its step)."""
    total = 0.0
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        grads, cross_entropy = gradients(params, x[batch], labels[batch], l2)
        nesterov_step(params, velocity, grads, learning_rate, momentum)
        total += cross_entropy * len(batch)
    return total / len(order)


def predict(params: dict[str, np.ndarray], x: np.ndarray, batch_size: int = 5000) -> np.ndarray:
    """The most probable class of every image (argmax of the logits), in chunks to bound memory."""
    return np.concatenate([forward(params, x[i:i + batch_size])[1].argmax(axis=1)
                           for i in range(0, len(x), batch_size)])


def error_rate(params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of misclassified images, rounded to 1e-6 (exact for 10,000 images)."""
    return round(float(np.mean(predict(params, x) != labels)), 6)
