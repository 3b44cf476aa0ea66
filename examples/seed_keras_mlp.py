#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The seed's Keras program on tensorpool: TensorFlow's import changed to `import tensorpool as tf`, and
Fashion-MNIST (the Debian package dataset-fashion-mnist) in place of MNIST; then the test set is evaluated.

    python examples/seed_keras_mlp.py                                # 5 epochs, mirrored on sim:0 and sim:1
    SEED_EPOCHS=1 SEED_LIMIT=6000 python examples/seed_keras_mlp.py  # quick: 1 epoch on the first 6,000
    mpirun -np 2 python examples/seed_keras_mlp.py                   # MultiWorkerMirroredStrategy, 2 workers
"""

import os

EPOCHS = int(os.environ.get("SEED_EPOCHS", "5"))
LIMIT = int(os.environ.get("SEED_LIMIT", "0")) or None  # train and evaluate on the first LIMIT examples
UNDER_MPIRUN = "OMPI_COMM_WORLD_SIZE" in os.environ  # launched by Open MPI's mpirun

import tensorpool as tf  # noqa: E402  (the seed's program starts here)
strategy = tf.distribute.MultiWorkerMirroredStrategy() if UNDER_MPIRUN else tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.models.Sequential([
        tf.keras.layers.Dense(512, activation='relu', input_shape=(784,)),
        tf.keras.layers.Dense(10, activation='softmax')])
    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
    (train_images, train_labels), (test_images, test_labels) = tf.keras.datasets.fashion_mnist.load_data()
    train_images = train_images.reshape(-1, 784) / 255.0
    test_images = test_images.reshape(-1, 784) / 255.0
    train_images, train_labels, test_images, test_labels = (
        train_images[:LIMIT], train_labels[:LIMIT], test_images[:LIMIT], test_labels[:LIMIT])
    model.fit(train_images, train_labels, epochs=EPOCHS)

test_loss, test_accuracy = model.evaluate(test_images, test_labels, verbose=0)
print(f"Test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}, "
      f"{strategy.num_replicas_in_sync} replicas, {len(train_images)} training examples")
