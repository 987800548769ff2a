"""ResNet-50 transfer learning on a TFDS image dataset read from a data dir, through ctrain.

Compute nodes are usually offline, so nothing is downloaded here: prepare the dataset once where
there is network and copy the data dir, and give ImageNet weights as a local file if you want
them (Keras' resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5); without --weights the
network starts from random weights and is trained whole.

    # once, on a machine with network: ctrain data fetch tf_flowers --data-dir /scratch/$USER/tfds
    srun -n 2 ctrain launch -- python examples/resnet50_transfer.py \\
        --data-dir /scratch/$USER/tfds --dataset tf_flowers --weights ~/resnet50_notop.h5
    # a folder of images instead (DIR/train/<class>/*.jpg, DIR/test/<class>/*.jpg):
    ctrain launch -- python examples/resnet50_transfer.py --image-folder DIR
    # offline demo data: python -m ctrain.train.demo_data tfds DIR, then --data-dir DIR
    #   --dataset ctrain_shapes --image-size 64

The input pipeline reads the TFRecords in a fixed order, shards before shuffling, decodes and
resizes in a parallel map, caches the resized images, shuffles, augments, batches and
prefetches. --synthetic trains the same model on random tensors (no input pipeline) and
--pipeline-only times the pipeline alone: together they show whether the input is the
bottleneck. The chief alone writes checkpoints and TensorBoard logs under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

START = time.time()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        help="TFDS data dir holding prepared datasets (default: $CTRAIN_DATA_DIR, "
        "$TFDS_DATA_DIR, ~/tensorflow_datasets)",
    )
    parser.add_argument(
        "--dataset", default="tf_flowers", help="NAME[/CONFIG][:VERSION] under --data-dir"
    )
    parser.add_argument("--image-folder", help="DIR/<split>/<class>/<image>, instead of TFDS")
    parser.add_argument("--train-split", default="train")
    parser.add_argument(
        "--val-split",
        default="auto",
        help="'auto': validation or test when the dataset has one, else the last 10%% of train; "
        "'none': no evaluation",
    )
    parser.add_argument("--weights", metavar="PATH", help="a local weights file for the base")
    parser.add_argument(
        "--fine-tune",
        action="store_true",
        help="train the base too when --weights is given (without weights it always is)",
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32, help="per replica")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over train")
    parser.add_argument("--lr", type=float, default=0.01, help="for one replica; scaled")
    parser.add_argument("--shuffle-buffer", type=int, default=2048)
    parser.add_argument(
        "--cache", default="memory", help="'memory', 'none', or a file prefix for tf.data's cache"
    )
    parser.add_argument("--threads", type=int, default=0, help="TF threads (0: TF decides)")
    parser.add_argument(
        "--synthetic", action="store_true", help="random tensors instead of the input pipeline"
    )
    parser.add_argument(
        "--pipeline-only", action="store_true", help="time the input pipeline, train nothing"
    )
    parser.add_argument("--out", default="runs/resnet50", help="checkpoints and logs (chief)")
    parser.add_argument("--report", metavar="DIR", help="each rank writes DIR/rank<R>.json")
    return parser.parse_args(argv)


ARGS = parse_args()
if ARGS.threads > 0:  # before TensorFlow starts its thread pools (ctrain's init creates them)
    for _name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ[_name] = str(ARGS.threads)

import numpy as np  # noqa: E402

import ctrain.distributed  # noqa: E402
import ctrain.train.data  # noqa: E402
from ctrain.errors import CtrainError  # noqa: E402
from ctrain.settings import resolve  # noqa: E402

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init, which sets TF_USE_LEGACY_KERAS)
import tensorflow_datasets as tfds  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE


def fail(message: str) -> NoReturn:
    sys.exit(f"resnet50_transfer: {message}")


def open_builder(args: argparse.Namespace) -> Any:
    """The dataset's builder, from files only (never the network)."""
    if args.image_folder:
        if not Path(args.image_folder, args.train_split).is_dir():
            fail(f"no {args.train_split}/ in {args.image_folder}: expected DIR/<split>/<class>/")
        return tfds.folder_dataset.ImageFolder(args.image_folder)
    try:  # the data dir and the error as `ctrain data` has them
        flags = {"data_dir": args.data_dir}
        where = ctrain.train.data.data_dir(resolve(flags, os.environ, Path.cwd()), os.environ)
        prepared = ctrain.train.data.prepared_dir(args.dataset, where)
    except CtrainError as exc:
        fail(
            f"{exc.message}. Fix: {exc.fix}; or make the offline demo dataset: "
            "python -m ctrain.train.demo_data tfds DIR, then --data-dir DIR --dataset ctrain_shapes"
        )
    return tfds.builder_from_directory(str(prepared))


def splits(builder: Any, args: argparse.Namespace) -> tuple[str, str | None]:
    """The train and validation split names (TFDS slicing where no validation split exists)."""
    names = set(builder.info.splits.keys())
    if args.train_split not in names and "[" not in args.train_split:
        fail(f"no split {args.train_split!r}; the dataset has {sorted(names)}")
    if args.val_split == "none":
        return args.train_split, None
    if args.val_split != "auto":
        return args.train_split, args.val_split
    for candidate in ("validation", "test"):
        if candidate in names and candidate != args.train_split:
            return args.train_split, candidate
    if args.image_folder:  # ImageFolder cannot slice splits
        return args.train_split, None
    return f"{args.train_split}[:90%]", f"{args.train_split}[90%:]"


def decode_and_resize(size: int) -> Any:
    def fn(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_image(image, channels=3, expand_animations=False)
        image = tf.image.resize(image, (size, size), antialias=True)
        return tf.cast(tf.round(image), tf.uint8), label  # uint8: a quarter of float's cache

    return fn


def to_model_input(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.keras.applications.resnet50.preprocess_input(tf.cast(image, tf.float32)), label


def augment(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.image.random_flip_left_right(image), label


def pipeline(builder: Any, split: str, args: argparse.Namespace, training: bool) -> Any:
    """TFRecords -> this rank's shard -> parallel decode/resize -> cache -> shuffle -> repeat
    -> parallel augment/preprocess -> batch -> prefetch."""
    data = builder.as_dataset(
        split=split,
        as_supervised=True,
        shuffle_files=False,  # the same order on every rank, so the shards are disjoint
        decoders={"image": tfds.decode.SkipDecoding()},  # decoded in our parallel map
    )
    data = ctx.shard(data)  # before shuffling
    data = data.map(decode_and_resize(args.image_size), num_parallel_calls=AUTOTUNE)
    if args.cache == "memory":
        data = data.cache()
    elif args.cache != "none":
        safe = re.sub(r"[^\w.-]+", "_", split)  # "train[:90%]" -> "train_90_"
        Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
        data = data.cache(f"{args.cache}-{safe}-rank{ctx.rank}")
    if training:
        data = data.shuffle(args.shuffle_buffer, seed=42, reshuffle_each_iteration=True)
    data = data.repeat()  # steps are counted, so every rank runs the same number
    if training:
        data = data.map(augment, num_parallel_calls=AUTOTUNE)
    data = data.map(to_model_input, num_parallel_calls=AUTOTUNE)
    return data.batch(ctx.batch_size(args.batch), drop_remainder=True).prefetch(AUTOTUNE)


def synthetic(args: argparse.Namespace, classes: int) -> Any:
    """Random model inputs of the same shape: the same training, no input pipeline."""
    count = ctx.batch_size(args.batch)
    rng = np.random.default_rng(ctx.rank)
    images = rng.uniform(-120, 150, (count, args.image_size, args.image_size, 3))
    labels = rng.integers(0, classes, size=count)
    data = tf.data.Dataset.from_tensor_slices((images.astype(np.float32), labels)).repeat()
    return ctx.shard(data).batch(count, drop_remainder=True).prefetch(AUTOTUNE)


def build_model(args: argparse.Namespace, classes: int) -> Any:
    if args.weights and not Path(args.weights).expanduser().is_file():
        fail(f"--weights {args.weights}: no such file (copy the weights file to this machine)")
    frozen = bool(args.weights) and not args.fine_tune
    with ctx.scope():
        base = tf.keras.applications.ResNet50(
            include_top=False,
            weights=str(Path(args.weights).expanduser()) if args.weights else None,
            input_shape=(args.image_size, args.image_size, 3),
            pooling="avg",
        )
        base.trainable = not frozen
        inputs = tf.keras.Input((args.image_size, args.image_size, 3))
        features = base(inputs, training=False) if frozen else base(inputs)
        features = tf.keras.layers.Dropout(0.2)(features)
        outputs = tf.keras.layers.Dense(classes)(features)
        model = tf.keras.Model(inputs, outputs)
        optimizer = tf.keras.optimizers.SGD(ctx.scale_lr(args.lr), momentum=0.9)
        model.compile(
            optimizer=ctx.optimizer(optimizer),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    return model


class Throughput(tf.keras.callbacks.Callback):
    """Images per second per epoch over all replicas; the first epoch is the warm-up."""

    def __init__(self, images_per_step: int) -> None:
        super().__init__()
        self.images_per_step = images_per_step
        self.rates: list[float] = []
        self.first_step_at: float | None = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.start, self.steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.steps += 1
        if self.first_step_at is None:
            self.first_step_at = time.time()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        elapsed = time.perf_counter() - self.start
        self.rates.append(self.steps * self.images_per_step / elapsed)

    def steady(self) -> float:
        return float(np.mean(self.rates[1:] or self.rates))


def time_pipeline(data: Any, steps: int, epochs: int, images_per_step: int) -> list[float]:
    """Images/second this process's pipeline yields, per pass of ``steps`` batches."""
    rates, batches = [], iter(data)
    for _ in range(epochs):
        start = time.perf_counter()
        for _ in range(steps):
            next(batches)
        rates.append(steps * images_per_step / (time.perf_counter() - start))
    return rates


def train_and_evaluate(
    args: argparse.Namespace,
    builder: Any,
    train: tf.data.Dataset,
    classes: int,
    val_split: str | None,
    steps: int,
    global_batch: int,
) -> dict[str, Any]:
    """Fine-tune, evaluate on the validation split, save the final weights; the report's part."""
    model = build_model(args, classes)
    out = Path(args.out)
    throughput = Throughput(global_batch)
    checkpoints = ctx.checkpoint_dir(out / "checkpoints")
    callbacks = [
        *ctx.callbacks(warmup_epochs=1),
        throughput,
        tf.keras.callbacks.ModelCheckpoint(
            str(checkpoints / "epoch-{epoch:02d}.weights.h5"), save_weights_only=True
        ),
    ]
    if ctx.is_chief:
        callbacks.append(tf.keras.callbacks.TensorBoard(str(out / "logs")))
    history = model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=steps,
        callbacks=callbacks,
        verbose=2 if ctx.verbose else 0,
    )
    accuracy = None
    if val_split and not args.synthetic:
        val_count = builder.info.splits[val_split].num_examples
        val_steps = max(1, val_count // global_batch)
        val = pipeline(builder, val_split, args, training=False)
        _, accuracy = model.evaluate(val, steps=val_steps, verbose=0)
        if ctx.hvd is not None:  # each rank saw its own shard
            accuracy = float(ctx.hvd.allreduce(tf.constant(accuracy), average=True))
    report: dict[str, Any] = dict(
        weights=args.weights,
        base_trainable=bool(model.get_layer("resnet50").trainable),
        images_per_second=throughput.steady(),
        rates=throughput.rates,
        first_step_at=throughput.first_step_at,
        loss=[float(v) for v in history.history["loss"]],
        val_accuracy=accuracy,
    )
    # every rank saves (MultiWorkerMirroredStrategy's save is collective); only the
    # chief's checkpoint_dir is --out, the others' is a scratch directory
    model.save_weights(str(checkpoints / "final.weights.h5"))
    if ctx.is_chief:
        shown = "n/a" if accuracy is None else f"{accuracy:.3f}"
        print(
            f"resnet50_transfer: mode={ctx.mode.value} replicas={ctx.replicas} "
            f"val_accuracy={shown} images_per_second={throughput.steady():.0f}",
            flush=True,
        )
    return report


def write_report(directory: str, rank: int, report: dict[str, Any]) -> None:
    """``DIRECTORY/rank<N>.json``, whole or not at all: a temporary file renamed."""
    path = Path(directory, f"rank{rank}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(temporary, path)


def main(args: argparse.Namespace) -> None:
    tf.keras.utils.set_random_seed(42)
    builder = open_builder(args)
    classes = builder.info.features["label"].num_classes
    train_split, val_split = splits(builder, args)
    train_count = builder.info.splits[train_split].num_examples
    global_batch = ctx.global_batch(args.batch)
    steps = args.steps_per_epoch or train_count // global_batch
    if steps < 1:
        fail(f"{train_count} training examples make no batch of {global_batch}")
    source = "synthetic tensors" if args.synthetic else f"{builder.info.name}:{train_split}"
    if ctx.is_chief:
        print(
            f"resnet50_transfer: {source}, {train_count} examples, {classes} classes, "
            f"{args.image_size}px, mode={ctx.mode.value} replicas={ctx.replicas}, "
            f"global batch {global_batch}, {steps} steps/epoch, "
            f"weights={'random' if not args.weights else args.weights}",
            flush=True,
        )
    train = (
        synthetic(args, classes) if args.synthetic else pipeline(builder, train_split, args, True)
    )

    report: dict[str, Any] = {
        "rank": ctx.rank,
        "size": ctx.size,
        "replicas": ctx.replicas,
        "mode": ctx.mode.value,
        "source": source,
        "image_size": args.image_size,
        "batch": args.batch,
        "steps_per_epoch": steps,
        "started_at": START,
    }
    if args.pipeline_only:
        rates = time_pipeline(train, steps, max(args.epochs, 2), ctx.batch_size(args.batch))
        rate = float(np.mean(rates[1:]))  # the first pass fills the cache
        report.update(pipeline_images_per_second=rate, pipeline_rates=rates)
        if ctx.is_chief:
            print(f"resnet50_transfer: pipeline alone: {rate:.0f} images/s", flush=True)
    else:
        report.update(
            train_and_evaluate(args, builder, train, classes, val_split, steps, global_batch)
        )
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if args.report:
        write_report(args.report, ctx.rank, report)


if __name__ == "__main__":
    main(ARGS)
