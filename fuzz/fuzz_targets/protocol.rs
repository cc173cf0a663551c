//! Any bytes through the request parser and the reply renderer: a request
//! or an error, never a panic; rendered replies are framed.
#![no_main]

use eniip_protocol::protocol::{is_final_line, parse_request, ClientReply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Ok(req) => {
            let again = parse_request(req.to_line().as_bytes()).expect("a rendered request parses");
            assert_eq!(again, req);
        }
        Err(e) => {
            let text = ClientReply::err(e).render();
            let lines: Vec<&str> = text.split_terminator('\n').collect();
            assert_eq!(lines.len(), 1);
            assert!(is_final_line(lines[0]));
        }
    }
});
