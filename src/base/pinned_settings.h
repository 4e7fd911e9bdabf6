/*-------------------------------------------------------------------------
 *
 * pinned_settings.h
 *	  The session settings the archiver pins on its walsender connection so
 *	  that text values (COPY output in snapshots, pgoutput's text tuples)
 *	  never depend on the server's defaults.  This list is the one source:
 *	  walsender_conn.c sets them and records them in each generation's
 *	  identity file, and the TAP tests (t/ChangestreamTest.pm) read this
 *	  file to put their oracle sessions under the same settings.  Keep one
 *	  CS_PINNED_SETTING("name", "value") per line.
 *
 *-------------------------------------------------------------------------
 */
CS_PINNED_SETTING("DateStyle", "ISO, YMD")
CS_PINNED_SETTING("IntervalStyle", "postgres")
CS_PINNED_SETTING("TimeZone", "UTC")
CS_PINNED_SETTING("extra_float_digits", "3")
CS_PINNED_SETTING("row_security", "off")	/* a snapshot must see every row, or fail */
