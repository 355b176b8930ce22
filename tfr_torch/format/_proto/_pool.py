"""tfr_torch's own protobuf descriptor pool.

The generated modules register TensorFlow's message names (`tensorflow.Example`, ...) here rather than in
protobuf's default pool, so importing tfr_torch next to TensorFlow never raises a duplicate-symbol error.
"""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
