"""The end-to-end fit's CNN: ResNet-18's shape (a 7x7 stem, four stages of two basic blocks, global pooling)
at a chosen base width, built without weights. torchvision's ``resnet18`` is this at width 64; PyPI's
torchvision cannot load beside the CPU torch here (requirements-bench.txt), so it is written out.

Inputs are uint8 pixels (or floats of 0-255, as the estimator hands features over), scaled in the model.
"""

from __future__ import annotations

from typing import Any


def resnet18_like(width: int = 64, classes: int = 10, seed: int = 0) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inputs: int, outputs: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True),
                nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False), nn.BatchNorm2d(outputs))
            self.shortcut = (nn.Identity() if stride == 1 and inputs == outputs else
                             nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                       nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
            channels = width
            for stage in range(4):
                outputs = width * 2 ** stage
                layers += [Block(channels, outputs, 1 if stage == 0 else 2), Block(outputs, outputs, 1)]
                channels = outputs
            self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(channels, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x.float() / 255.0))

    torch.manual_seed(seed)
    return ResNet()
