/*-------------------------------------------------------------------------
 *
 * recapture_request.h
 *	  The archiver's pending re-capture, kept durably in
 *	  generations/<gen>/recapture (docs/FORMAT.md section 3.5).  See
 *	  recapture_request.c; the archiver's side is worker/recapture.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RECAPTURE_REQUEST_H
#define CS_RECAPTURE_REQUEST_H

#include "access/xlogdefs.h"

extern bool cs_read_recapture_request(const char *directory,
									  uint64 generation, XLogRecPtr *lsn);
extern void cs_write_recapture_request(const char *directory,
									   uint64 generation, XLogRecPtr lsn);
extern void cs_remove_recapture_request(const char *directory,
										uint64 generation);

#endif							/* CS_RECAPTURE_REQUEST_H */
