/*-------------------------------------------------------------------------
 *
 * wire.h
 *	  Big-endian integers in byte buffers, as the replication protocol and
 *	  changestream's segment format store them.  Unaligned-safe.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CHANGESTREAM_WIRE_H
#define CHANGESTREAM_WIRE_H

#include "port/pg_bswap.h"

/* cs_get32(p) -> uint32 read big-endian from p */
static inline uint32
cs_get32(const char *p)
{
	uint32		v;

	memcpy(&v, p, 4);
	return pg_ntoh32(v);
}

/* cs_get64(p) -> uint64 read big-endian from p */
static inline uint64
cs_get64(const char *p)
{
	uint64		v;

	memcpy(&v, p, 8);
	return pg_ntoh64(v);
}

/* cs_put32(p, v): write v big-endian at p */
static inline void
cs_put32(char *p, uint32 v)
{
	v = pg_hton32(v);
	memcpy(p, &v, 4);
}

/* cs_put64(p, v): write v big-endian at p */
static inline void
cs_put64(char *p, uint64 v)
{
	v = pg_hton64(v);
	memcpy(p, &v, 8);
}

#endif							/* CHANGESTREAM_WIRE_H */
