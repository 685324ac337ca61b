"""Rank child: the Keras side of a rank's ``model.fit``: the compiled model, its ``tf.data`` feed, its
callbacks (ours and the user's, in Horovod's order) and the errors it raises."""
