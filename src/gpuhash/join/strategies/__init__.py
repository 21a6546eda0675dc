"""The join strategies beyond one table probed at once: partitioned, radix, the short path of
the commonest call, and streamed through the GPU from host memory."""
