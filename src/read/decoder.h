/*-------------------------------------------------------------------------
 *
 * decoder.h
 *	  The one decoder of archived pgoutput: changes of a generation in
 *	  commit order, each with the Relation in force at its LSN.  See
 *	  decoder.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DECODER_H
#define CS_DECODER_H

#include "replication/logicalproto.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "read/generation_reader.h"

typedef struct CsDecoder CsDecoder;

typedef enum CsChangeKind
{
	CS_CHANGE_BEGIN,
	CS_CHANGE_COMMIT,
	CS_CHANGE_RELATION,
	CS_CHANGE_TYPE,
	CS_CHANGE_INSERT,
	CS_CHANGE_UPDATE,
	CS_CHANGE_DELETE,
	CS_CHANGE_TRUNCATE,
	CS_CHANGE_MESSAGE
} CsChangeKind;

/*
 * One decoded message.  Everything it points to stays valid until the next
 * cs_decoder_next() call, except rel and truncated's members, which stay
 * valid until the decoder is closed.
 */
typedef struct CsChange
{
	CsChangeKind kind;
	bool		in_txn;			/* inside BEGIN .. COMMIT */
	XLogRecPtr	commit_lsn;		/* the transaction's (BEGIN final LSN); for
								 * a message outside one, its own LSN */
	XLogRecPtr	end_lsn;		/* COMMIT: end of the commit record */
	TimestampTz commit_time;	/* the transaction's; 0 outside one */
	TransactionId xid;			/* the transaction's; Invalid outside one */
	int			ordinal;		/* 1.. within the transaction, per change */
	LogicalRepRelation *rel;	/* INSERT/UPDATE/DELETE/RELATION */
	char		old_kind;		/* UPDATE/DELETE: 'K', 'O' or 0 (none) */
	LogicalRepTupleData oldtup;
	LogicalRepTupleData newtup;
	List	   *truncated;		/* TRUNCATE: LogicalRepRelation * */
	bool		cascade;
	bool		restart_seqs;
	bool		transactional;	/* MESSAGE */
	const char *prefix;
	const char *content;
	Size		content_len;
	const char *path;			/* where the message lies */
	int64		frame_offset;
} CsChange;

extern CsDecoder *cs_decoder_open(const char *directory, uint64 generation,
								  XLogRecPtr start_bound,
								  XLogRecPtr end_bound);
extern bool cs_decoder_next(CsDecoder *decoder, CsChange *change);
extern char *cs_decoder_type_name(CsDecoder *decoder, Oid typid,
								  int32 typmod);
extern const int32 *cs_decoder_typmods(CsDecoder *decoder,
									   LogicalRepRelation *rel);
extern void cs_decoder_set_time_bounds(CsDecoder *decoder, bool has_start,
									   TimestampTz start_time, bool has_end,
									   TimestampTz end_time);
extern void cs_decoder_set_stop_time(CsDecoder *decoder,
									 TimestampTz stop_time);
extern bool cs_decoder_stopped(CsDecoder *decoder);
extern void cs_decoder_set_memory(CsDecoder *decoder,
								  const CsSegmentMemory *memory);
extern void cs_decoder_reached(CsDecoder *decoder, XLogRecPtr *position,
							   TimestampTz *send_time);
extern void cs_decoder_close(CsDecoder *decoder);
extern uint64 cs_resolve_generation(const char *directory,
									 const char *gen_text);

struct ArrayType;
extern List *cs_relation_names(struct ArrayType *arr);

#endif							/* CS_DECODER_H */
