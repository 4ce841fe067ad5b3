// q8k.h: quant's q8_K block (block_q8_K), the activations of the int8
// tensor path (tensor_q8.metal writes them, tensor_q8.metal and
// tensor_moe.metal read them): float d, int8 qs[256], int16 bsums[16] (the
// codes' sums per 16).
#ifndef CLEF_Q8K_H
#define CLEF_Q8K_H

#define Q8K_BYTES 292 // bytes per block of 256 values

#endif // CLEF_Q8K_H
