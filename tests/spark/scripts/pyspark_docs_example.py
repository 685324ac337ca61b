"""TorchDistributor used the way pyspark's and Databricks' documentation show it, made complete.

The documentation's function, with its undefined helpers written out (a model, a data set, one
epoch of training) and its two slips fixed (``DistributedDataParallel`` is a class, imported from
``torch.nn.parallel``; ``dist.destroy_process_group()`` ends the group). Like a notebook cell, it
expects an active SparkSession. The test runs it after changing only the import line below.
"""

import os

from pyspark.ml.torch.distributor import TorchDistributor

NUM_SAMPLES = 64
BATCH_SIZE = 8


def create_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).double()


def create_dataset():
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(7)
    x = torch.randn(NUM_SAMPLES, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def train_one_epoch(model, loader, learning_rate):
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {name: value.tolist() for name, value in model.module.state_dict().items()}


def train(learning_rate, use_gpu):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    backend = "nccl" if use_gpu else "gloo"
    dist.init_process_group(backend)
    device = int(os.environ["LOCAL_RANK"]) if use_gpu else "cpu"
    model = DDP(create_model().to(device))
    dataset = create_dataset()
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler, batch_size=BATCH_SIZE)

    output = train_one_epoch(model, loader, learning_rate)
    dist.destroy_process_group()
    return output


distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
output = distributor.run(train, 1e-1, False)
