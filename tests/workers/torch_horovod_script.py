"""A training script written for Horovod (in the style of its pytorch_mnist example, on synthetic data);
the only change is the import line. Run by tests/torch/test_torch_port.py."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import collective.torch as hvd  # was: import horovod.torch as hvd

from common import report


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.bn = hvd.SyncBatchNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.bn(self.fc1(x)))), dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def main():
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)

    generator = torch.Generator().manual_seed(0)
    features = torch.randn(512, 20, generator=generator)
    labels = (features[:, :4].argmax(dim=1)).long()
    dataset = torch.utils.data.TensorDataset(features, labels)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.fp16, op=hvd.Average)

    losses = []
    for epoch in range(4):
        model.train()
        sampler.set_epoch(epoch)
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            shard = torch.tensor(list(sampler))
            test_loss = F.nll_loss(model(features[shard]), labels[shard]).item()
            accuracy = (model(features[shard]).argmax(dim=1) == labels[shard]).float().mean().item()
        losses.append(metric_average(test_loss, "avg_loss"))
        accuracy = metric_average(accuracy, "avg_accuracy")
    weights = torch.cat([p.detach().reshape(-1) for p in model.state_dict().values() if p.dtype.is_floating_point])
    report(losses=losses, accuracy=accuracy, checksum=float(weights.double().sum()))
    hvd.shutdown()


if __name__ == "__main__":
    main()
