"""The plugin's log handler (cli._AfterReplyHandler): records logged on the event loop are
written after the handler that logged returns, together; without a loop at once."""

import asyncio
import io
import logging
import threading

from nri_cpumgr import cli


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def handler():
    stream = CountingStream()
    target = logging.StreamHandler(stream)
    target.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    return cli._AfterReplyHandler(target), stream


def record(msg, *args, level=logging.INFO):
    return logging.LogRecord("t", level, __file__, 0, msg, args, None)


def test_without_a_loop_records_are_written_at_once():
    h, stream = handler()
    h.handle(record("a %s", 1))
    assert stream.getvalue() == "INFO a 1\n"


def test_on_the_loop_records_wait_for_the_batch_and_go_out_in_one_write(monkeypatch):
    monkeypatch.setattr(cli, "LOG_BATCH_S", 0.01)
    h, stream = handler()

    async def main():
        h.handle(record("first %d", 1))
        try:
            raise ValueError("boom")
        except ValueError as e:
            r = record("second", level=logging.ERROR)
            r.exc_info = (type(e), e, e.__traceback__)
            h.handle(r)
        h.handle(record("third"))
        assert stream.getvalue() == ""  # the handler that logged has not returned yet
        await asyncio.sleep(0)
        assert stream.getvalue() == ""  # nor has the batch's delay passed
        await asyncio.sleep(0.05)
        return stream.getvalue()

    text = asyncio.run(main())
    lines = text.splitlines()
    assert lines[0] == "INFO first 1" and lines[1] == "ERROR second"
    assert "ValueError: boom" in text and lines[-1] == "INFO third"
    assert stream.writes == 1


def test_records_left_when_the_loop_stops_are_written_by_flush_pending():
    h, stream = handler()

    async def main():
        h.handle(record("late"))

    asyncio.run(main())  # the loop closes before the batch's timer fires
    assert stream.getvalue() == ""
    h.flush_pending()
    assert stream.getvalue() == "INFO late\n"
    h.flush_pending()  # nothing twice
    assert stream.getvalue() == "INFO late\n"


def test_another_threads_record_goes_after_those_the_loop_holds():
    h, stream = handler()

    async def main():
        h.handle(record("on the loop"))
        t = threading.Thread(target=h.handle, args=(record("from a thread"),))
        t.start()
        t.join()
        assert stream.getvalue() == ""  # not ahead of the loop's record
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert stream.getvalue() == "INFO on the loop\nINFO from a thread\n"
    h.handle(record("later, no loop"))  # nothing held: at once
    assert stream.getvalue().endswith("INFO later, no loop\n")


def test_on_the_loop_a_record_is_formatted_when_logged_and_the_batch_only_written():
    """(formatting a batch at its timer held up a request arriving then: the batch's write is
    only a write)"""
    h, stream = handler()
    shown = [1]

    async def main():
        h.handle(record("value %s", shown))
        shown.append(2)  # changed after the call that logged it: the line keeps [1]
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert stream.getvalue() == "INFO value [1]\n" and stream.writes == 1
