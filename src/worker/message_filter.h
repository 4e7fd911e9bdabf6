/*-------------------------------------------------------------------------
 *
 * message_filter.h
 *	  changestream.message_prefixes: which logical decoding messages are
 *	  archived (message_filter.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_MESSAGE_FILTER_H
#define CS_MESSAGE_FILTER_H

extern bool cs_message_archived(const char *prefix);

#endif							/* CS_MESSAGE_FILTER_H */
