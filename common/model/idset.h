/*
 * idset.h - a set of request ids (JSON strings and integers), each with the
 * line it belongs to: the ids `generate --batch` has seen (a duplicate is
 * refused), the ids a --resume file already has results for, and the key
 * --shard-by id hashes.
 *
 * An id's key is its JSON type and value: 's' + the string's bytes, or 'i' +
 * the integer's decimal digits, so "7" and 7 are different ids, as they are
 * in the results.
 */
#ifndef LLMKIT_IDSET_H
#define LLMKIT_IDSET_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* An open-addressing hash set; zero-initialised = empty. */
struct id_entry {
    char *key;                  /* NULL = empty slot */
    size_t len;
    uint64_t hash;
    int64_t line;
};

struct id_set {
    struct id_entry *v;         /* [cap], cap a power of two */
    size_t n, cap;
};

/* id_set_add() : records id (a JSON string or integer) with line (> 0).
 * Returns 0 when it is new, the line recorded first when it was there
 * already (the set is unchanged), -ST_NOMEM. */
int64_t id_set_add(struct id_set *set, const json_t *id, int64_t line);

/* id_set_find() : the line recorded with id, or 0 when id is not in the set. */
int64_t id_set_find(const struct id_set *set, const json_t *id);

/* id_hash() : the 64-bit FNV-1a hash of id's key (see above): stable across
 * runs, machines and builds. */
uint64_t id_hash(const json_t *id);

/* id_set_release() : frees the entries; the set is empty again. */
void id_set_release(struct id_set *set);

#endif
