"""purecover.data.doc_ids: the id a candidate is named by."""


def test_candidate_doc_id_reads_records_dicts_and_strings():
    from purecover.data.doc_ids import candidate_doc_id
    from purecover.records import CandidateDoc

    assert candidate_doc_id(CandidateDoc(doc_id="w:7", text="t"), 0) == "w:7"  # a record's field, not its position
    assert candidate_doc_id(CandidateDoc(text="t"), 2) == "3"
    assert candidate_doc_id({"doc_id": 12, "text": "t"}, 0) == "12"
    assert candidate_doc_id("a plain passage", 4) == "5"
