"""The models of gotrain's torch/nn/models package, in PyTorch, with the same names.

A state dict saved from either side loads into the other with strict=True.
"""
import torch.nn as nn


def mlp(in_features, hidden, out):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, out),
    )


def small_cnn(classes=10):
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(64 * 7 * 7, 128),
        nn.ReLU(),
        nn.Linear(128, classes),
    )
