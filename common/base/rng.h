/*
 * rng.h - the project's one pseudo-random generator: xoshiro256** (Blackman
 * and Vigna) seeded through splitmix64, so that the same seed gives the same
 * stream on every platform.  Used by the sampler (generate --seed) and by
 * kvstat's length distributions (--seed).
 */
#ifndef LLMKIT_RNG_H
#define LLMKIT_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

/* rng_seed() : the state from four splitmix64 outputs of seed. */
void rng_seed(struct rng *r, uint64_t seed);

/* rng_next() : the next 64-bit output. */
uint64_t rng_next(struct rng *r);

/* rng_uniform() : a double in [0, 1) from the top 53 bits of one output. */
double rng_uniform(struct rng *r);

/* rng_unit_open() : a double in the open interval (0, 1) (the 53 bits shifted
 * half a step), for inverse-CDF sampling with log(). */
double rng_unit_open(struct rng *r);

#endif
