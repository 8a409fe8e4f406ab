// devs console: live inbox. The pages work without this script; with it, the
// inbox follows the log over Server-Sent Events (GET /console/live) and
// fetches the items again (GET /console/inbox?after=N) when the log grows.
// Items are replaced one by one, by data-task-id, and an item holding the
// keyboard focus or a half-typed reason is left as it is until it is sent.
"use strict";
(function () {
  var inbox = document.getElementById("inbox");
  var state = document.getElementById("live-state");
  if (!inbox || !window.EventSource || !window.fetch) {
    return;
  }
  var fragment = inbox.getAttribute("data-fragment");
  var live = inbox.getAttribute("data-live");
  var position = inbox.getAttribute("data-position") || "0";
  var wanted = null;
  var busy = false;

  function keyOf(node) {
    return node.getAttribute("data-task-id") || "#" + node.className;
  }

  function edited(node) {
    if (node.contains(document.activeElement)) {
      return true;
    }
    var inputs = node.querySelectorAll("input[type=text]");
    for (var i = 0; i < inputs.length; i += 1) {
      if (inputs[i].value !== "") {
        return true;
      }
    }
    return false;
  }

  function apply(html) {
    var holder = document.createElement("ol");
    holder.innerHTML = html;
    var fresh = Array.prototype.slice.call(holder.children);
    var old = {};
    Array.prototype.forEach.call(inbox.children, function (node) {
      old[keyOf(node)] = node;
    });
    var keep = {};
    var before = null;
    for (var i = fresh.length - 1; i >= 0; i -= 1) {
      var node = fresh[i];
      var key = keyOf(node);
      var current = old[key];
      keep[key] = true;
      if (current && (current.outerHTML === node.outerHTML || edited(current))) {
        node = current;
      }
      if (node !== current && current) {
        inbox.replaceChild(node, current);
      }
      inbox.insertBefore(node, before);
      before = node;
    }
    Object.keys(old).forEach(function (key) {
      if (!keep[key] && old[key].parentNode === inbox) {
        inbox.removeChild(old[key]);
      }
    });
  }

  function refresh() {
    if (busy || wanted === null) {
      return;
    }
    busy = true;
    var after = wanted;
    wanted = null;
    fetch(fragment + "?after=" + encodeURIComponent(after), {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (answer) {
        if (answer.status === 401) {
          window.location.reload();
          return null;
        }
        return answer.ok ? answer.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          apply(html);
          inbox.setAttribute("data-position", after);
        }
      })
      .catch(function () {
        wanted = wanted === null ? after : wanted;
      })
      .then(function () {
        busy = false;
        if (wanted !== null) {
          refresh();
        }
      });
  }

  var source = new EventSource(live + "?after=" + encodeURIComponent(position));
  source.addEventListener("log", function (message) {
    wanted = message.data;
    refresh();
  });
  source.addEventListener("open", function () {
    inbox.setAttribute("data-live-open", "true");
    if (state) {
      state.textContent =
        "Every pending session and open hand-off, oldest first. Live.";
    }
  });
  source.addEventListener("error", function () {
    inbox.setAttribute("data-live-open", "false");
  });
})();

// Deadlines: each wait's countdown, every second, from its data-deadline
// (an ISO time); the page's own text is the same figure when it was drawn.
(function () {
  function left(seconds) {
    if (seconds <= 0) {
      return "passed: handing off";
    }
    if (seconds < 60) {
      return seconds + " s left";
    }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s left";
    }
    if (seconds < 86400) {
      return (
        Math.floor(seconds / 3600) +
        " h " +
        Math.floor((seconds % 3600) / 60) +
        " min left"
      );
    }
    return (
      Math.floor(seconds / 86400) +
      " d " +
      Math.floor((seconds % 86400) / 3600) +
      " h left"
    );
  }

  function tick() {
    var now = Date.now();
    var nodes = document.querySelectorAll("[data-deadline]");
    Array.prototype.forEach.call(nodes, function (node) {
      var at = Date.parse(node.getAttribute("data-deadline"));
      if (!isNaN(at)) {
        node.textContent = left(Math.floor((at - now) / 1000));
      }
    });
  }

  tick();
  window.setInterval(tick, 1000);
})();
